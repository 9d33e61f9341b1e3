"""End-to-end: opaque `resource.nvidia.com/v1beta1` configs in real claims, through the real scheduler (which
copies them into the allocation) and the real kubelet, as with NVIDIA's driver: applied settings reach the
container's env; a config the driver rejects leaves the pod with a FailedPrepareDynamicResources event that
carries the real error chain.

`timeslicing_plugins` restarts the session cluster's plugins with the TimeSlicingSettings gate for this
module, and without it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.testing import claim_pod, resource_claim
from tests.harness.kube import apply, get, items, pod_phase, wait_for
from tests.harness.seedlab import timeslicing_config

pytestmark = pytest.mark.cluster

GPU_NODES = "nvidia.com/dra-kubelet-plugin=true"


@pytest.fixture(scope="module")
def timeslicing_plugins(cluster: Any) -> Iterator[None]:
    nodes = [n["metadata"]["name"] for n in items(cluster, "nodes", "-l", GPU_NODES)]
    for node in nodes:
        cluster.restart_plugin(node, args=["--feature-gates=TimeSlicingSettings=true"])
    yield
    for node in nodes:
        cluster.restart_plugin(node, args=[])


def test_a_timeslicing_config_reaches_the_container_env(
    cluster: Any, namespace: str, timeslicing_plugins: None
):
    apply(
        cluster,
        namespace,
        resource_claim("sliced", config=[timeslicing_config()]),
        claim_pod("sliced", {"resourceClaimName": "sliced"}),
    )
    wait_for(
        lambda: pod_phase(cluster, namespace, "sliced") == "Running", what="pod sliced Running", timeout=180
    )

    allocation = get(cluster, "resourceclaim", "sliced", "-n", namespace)["status"]["allocation"]["devices"]
    assert allocation["config"][0]["source"] == "FromClaim"  # the scheduler copied the claim's config
    (result,) = allocation["results"]
    minor = result["device"].removeprefix("gpu-")
    env = dict(item.split("=", 1) for item in cluster.container_record(namespace, "sliced", "ctr")["env"])
    assert env[f"FAKEPLUGIN_GPU_{minor}_SHARING_STRATEGY"] == "TimeSlicing"
    assert env[f"FAKEPLUGIN_GPU_{minor}_TIMESLICE_INTERVAL"] == "Long"


def test_an_unknown_field_fails_prepare_with_the_real_error_chain(
    cluster: Any, namespace: str, timeslicing_plugins: None
):
    apply(
        cluster,
        namespace,
        resource_claim("bad", config=[timeslicing_config(x=1)]),
        claim_pod("bad", {"resourceClaimName": "bad"}),
    )

    def failures() -> list[str]:
        events = items(cluster, "events", "-n", namespace, "--field-selector", "involvedObject.name=bad")
        return [e["message"] for e in events if e.get("reason") == "FailedPrepareDynamicResources"]

    messages = wait_for(failures, what="a FailedPrepareDynamicResources event for pod bad", timeout=180)
    uid = get(cluster, "resourceclaim", "bad", "-n", namespace)["metadata"]["uid"]
    chain = (
        f"error preparing devices for claim {namespace}/bad:{uid}: prepare devices failed: "
        "error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "x"'
    )
    assert any(chain in m for m in messages), messages
    assert pod_phase(cluster, namespace, "bad") == "Pending"
