"""Test your GPU workloads against fakeplugin, with pytest or without (docs/testing.md).

    from fakeplugin.testing import FakepluginCluster

    with FakepluginCluster.start(Path("my-lab.yaml"), simulated_nodes=2) as cluster:  # or .attach(kubeconfig)
        ns = cluster.create_namespace()
        cluster.apply(MY_YAML, ns)
        cluster.wait_for_pod(ns, "trainer")
        print(cluster.allocation(ns, "gpu"), cluster.container(ns, "trainer", "main").run("nvidia-smi -L"))

The objects to apply, as dicts: `resource_claim(name, device_request(selector=CEL))`,
`claim_pod(name, {"resourceClaimName": name})`, and `resource_claim_template`, `opaque_config`, `pod`,
`container` (fakeplugin.testing.objects).

With pytest, the plugin fakeplugin.testing.pytest_plugin (registered by installing the package) gives the
fixtures `fakeplugin_cluster` and `fakeplugin_namespace`.

Names are imported on first use (PEP 562): the pytest plugin imports this package in every pytest run,
and the cluster machinery behind these names takes a third of a second to import.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakeplugin.testing.containers import ContainerView
    from fakeplugin.testing.faults import Faults
    from fakeplugin.testing.objects import (
        Allocated,
        claim_pod,
        container,
        device_request,
        opaque_config,
        pod,
        resource_claim,
        resource_claim_template,
    )
    from fakeplugin.testing.session import (
        FakepluginCluster,
        FakepluginUnavailable,
        PodTimeout,
        seed_lab_inventory,
    )

_WHERE = {
    "Allocated": "objects",
    "claim_pod": "objects",
    "container": "objects",
    "device_request": "objects",
    "opaque_config": "objects",
    "pod": "objects",
    "resource_claim": "objects",
    "resource_claim_template": "objects",
    "ContainerView": "containers",
    "Faults": "faults",
    "FakepluginCluster": "session",
    "FakepluginUnavailable": "session",
    "PodTimeout": "session",
    "seed_lab_inventory": "session",
}

__all__ = [
    "Allocated",
    "ContainerView",
    "FakepluginCluster",
    "FakepluginUnavailable",
    "Faults",
    "PodTimeout",
    "claim_pod",
    "container",
    "device_request",
    "opaque_config",
    "pod",
    "resource_claim",
    "resource_claim_template",
    "seed_lab_inventory",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
