"""The e2e session's cluster (tests/e2e/conftest.py): the seed lab of examples/seed-lab.yaml as the reference
lab runs it, and how its tests read it.

Nodes: `T10` (two T10s) and `A5000` (one RTX A5000), real kubelets labelled `GPU_NODE_LABELS`, plus the plain
kwok-simulated `WORKERS`. The plugins re-read the inventory file: `write_inventory`, then wait up to
`WITHIN` for `published` to show it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.runtime.nodes import INVENTORY_POLL_SECONDS
from fakeplugin.testing import device_request, opaque_config, resource_claim
from tests.harness.kube import get, items, pod_phase
from tests.harness.paths import SEED_LAB

T10 = "capi-dralabs-md-gput10-gzl84-f2m2d"
A5000 = "capi-dralabs-md-gpua5000-jw4mx-d64jz"
GPU_NODE_LABELS = {"nvidia.com/dra-kubelet-plugin": "true"}  # as the lab labels GPU nodes
WORKERS = {f"worker-{i}": {"node-role.kubernetes.io/worker": ""} for i in (1, 2, 3)}
WITHIN = 6 * INVENTORY_POLL_SECONDS  # a poll, the publisher's update, the API server: a few seconds


def seed_lab_cluster_inventory(path: Path) -> Path:
    """examples/seed-lab.yaml with the lab's GPU-node label and its three plain workers added."""
    inventory = yaml.safe_load(SEED_LAB.read_text())
    for node in inventory["nodes"]:
        node["labels"] = {**node.get("labels", {}), **GPU_NODE_LABELS}
    inventory["nodes"] += [{"name": name, "labels": labels} for name, labels in WORKERS.items()]
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def write_inventory(path: Path, inventory: dict[str, Any]) -> None:
    """Atomically, as a ConfigMap update swaps the file: the plugin never reads half of it."""
    write_atomic(path, yaml.safe_dump(inventory, sort_keys=False).encode(), mode=0o644)


def product_claim(name: str, product: str) -> dict[str, Any]:
    """A one-GPU claim whose CEL selector asks for one product name."""
    cel = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
    return resource_claim(name, device_request(selector=cel))


def timeslicing_config(**extra: Any) -> dict[str, Any]:
    """An opaque GpuConfig for request `gpu`: time-slicing with the Long interval, plus `extra` fields."""
    return opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
            **extra,
        },
        requests=["gpu"],
    )


def our_slices(cluster: Any) -> list[dict[str, Any]]:
    return [s for s in items(cluster, "resourceslices") if s["spec"]["driver"] == "gpu.nvidia.com"]


def published(cluster: Any) -> dict[str, dict[str, str]]:
    """Node → device name → UUID, as the ResourceSlices show them."""
    return {
        s["spec"]["nodeName"]: {d["name"]: d["attributes"]["uuid"]["string"] for d in s["spec"]["devices"]}
        for s in our_slices(cluster)
    }


def running(cluster: Any, namespace: str, pod: str) -> bool:
    return pod_phase(cluster, namespace, pod) == "Running"


def allocation(cluster: Any, namespace: str, claim: str) -> list[dict[str, Any]]:
    """The claim's allocation results; [] while unallocated."""
    status = get(cluster, "resourceclaim", claim, "-n", namespace).get("status", {})
    return status.get("allocation", {}).get("devices", {}).get("results", [])


def cdi_file(cluster: Any, node: str, claim_uid: str) -> Path:
    return cluster.node_dirs(node).cdi / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml"
