"""`serve --device-health`: the kubelet watches our v1alpha1.DRAResourceHealth stream (gate
ResourceHealthStatus, on in the test cluster) and shows each allocated device's health in the pod's
status, as KEP-4680 describes.

The 1.35+ kubelet finds a container's claim through pod.status.resourceClaimStatuses, which only
template-generated claims have; the 1.34 one by the pod's entry name (kubernetes PR #134875): the claim
here is made the way the cluster's kubelet can see it (tests.harness.kube.health_watched_claim).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.testing import claim_pod, device_request
from tests.harness.kube import apply, get, health_watched_claim, pod_claim_name, pod_phase, wait_for
from tests.harness.seedlab import A5000

pytestmark = pytest.mark.cluster


@pytest.fixture
def health_plugin(cluster: Any) -> Iterator[str]:
    # PR #1243's design (no NVIDIA release serves it): the GPU plugin with its gate only.
    cluster.restart_plugin(A5000, args=["--device-health", "--feature-gates=NVMLDeviceHealthCheck=true"])
    yield A5000
    cluster.restart_plugin(A5000, args=[])


def test_device_health_reaches_the_pod_status(cluster: Any, namespace: str, health_plugin: str) -> None:
    cel = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA RTX A5000'"
    claim, entry = health_watched_claim(cluster, "a5000", device_request(selector=cel))
    apply(cluster, namespace, claim, claim_pod("watched", entry))
    wait_for(lambda: pod_phase(cluster, namespace, "watched") == "Running", what="pod Running")

    def reported() -> list[dict[str, Any]]:
        statuses = get(cluster, "pod", "watched", "-n", namespace)["status"].get("containerStatuses", [])
        return [s for c in statuses for s in c.get("allocatedResourcesStatus") or []]

    (status,) = wait_for(reported, what="allocatedResourcesStatus in the pod status", timeout=60)
    claim_name = pod_claim_name(cluster, namespace, "watched")
    uid = get(cluster, "resourceclaim", claim_name, "-n", namespace)["metadata"]["uid"]
    assert status["name"] == "claim:gpu"
    assert status["resources"] == [
        {"resourceID": f"k8s.gpu.nvidia.com/claim={uid}-gpu-0", "health": "Healthy"}
    ]
