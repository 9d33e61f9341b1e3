"""`serve --device-health`: the kubelet watches our v1alpha1.DRAResourceHealth stream (gate
ResourceHealthStatus, on in the test cluster) and shows each allocated device's health in the pod's
status, as KEP-4680 describes.

The 1.35 kubelet finds a container's claim through pod.status.resourceClaimStatuses, which only
template-generated claims have, so the pod here uses a ResourceClaimTemplate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.kube import apply, claim_pod, get, pod_phase, resource_claim, wait_for

pytestmark = pytest.mark.cluster

A5000 = "capi-dralabs-md-gpua5000-jw4mx-d64jz"


@pytest.fixture
def health_plugin(cluster: Any) -> Iterator[str]:
    cluster.restart_plugin(A5000, args=["--device-health"])
    yield A5000
    cluster.restart_plugin(A5000, args=[])


def test_device_health_reaches_the_pod_status(cluster: Any, namespace: str, health_plugin: str) -> None:
    cel = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA RTX A5000'"
    claim_spec = resource_claim(
        "", {"deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": cel}}]}
    )
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "a5000"},
        "spec": {"spec": claim_spec["spec"]},
    }
    apply(cluster, namespace, template, claim_pod("watched", {"resourceClaimTemplateName": "a5000"}))
    wait_for(lambda: pod_phase(cluster, namespace, "watched") == "Running", what="pod Running")

    def reported() -> list[dict[str, Any]]:
        statuses = get(cluster, "pod", "watched", "-n", namespace)["status"].get("containerStatuses", [])
        return [s for c in statuses for s in c.get("allocatedResourcesStatus") or []]

    (status,) = wait_for(reported, what="allocatedResourcesStatus in the pod status", timeout=60)
    claim_name = get(cluster, "pod", "watched", "-n", namespace)["status"]["resourceClaimStatuses"][0]
    uid = get(cluster, "resourceclaim", claim_name["resourceClaimName"], "-n", namespace)["metadata"]["uid"]
    assert status["name"] == "claim:gpu"
    assert status["resources"] == [
        {"resourceID": f"k8s.gpu.nvidia.com/claim={uid}-gpu-0", "health": "Healthy"}
    ]
