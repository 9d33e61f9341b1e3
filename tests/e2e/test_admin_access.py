"""End-to-end: admin access (KEP DRAAdminAccess, beta and on by default since Kubernetes 1.34) to a GPU that
an ordinary claim already holds: the real scheduler allocates it again with `adminAccess: true`, our plugin
prepares it as the real driver does (admin results are left out of its overlap check on both sides:
SIGS v25.12.0 cmd/gpu-kubelet-plugin/device_state.go validateNoOverlappingPreparedDevices), and both pods
run, each container seeing the one GPU through its own claim's CDI device.
"""

from __future__ import annotations

import pytest

from fakeplugin.testing import FakepluginCluster, claim_pod, device_request, resource_claim
from tests.harness.kube import apply, get, items

pytestmark = pytest.mark.cluster

ADMIN_LABEL = (
    "resource.kubernetes.io/admin-access"  # k8s pkg/apis/resource/types.go DRAAdminNamespaceLabelKey
)


def device_uuid(cluster: FakepluginCluster, node: str, device: str) -> str:
    for s in items(cluster, "resourceslices"):
        if s["spec"].get("nodeName") == node and s["spec"]["driver"] == "gpu.nvidia.com":
            for d in s["spec"].get("devices", []):
                if d["name"] == device:
                    return d["attributes"]["uuid"]["string"]
    raise AssertionError(f"no device {device} of node {node} in the published slices")


def test_an_admin_claim_shares_a_held_gpu_and_sees_the_same_gpu(
    cluster: FakepluginCluster, namespace: str
) -> None:
    cluster.kubectl("label", "namespace", namespace, f"{ADMIN_LABEL}=true")
    t10 = 'device.attributes["gpu.nvidia.com"].productName.lowerAscii().contains("t10")'
    apply(
        cluster,
        namespace,
        resource_claim("user", device_request(selector=t10)),
        claim_pod("user", {"resourceClaimName": "user"}),
    )
    cluster.wait_for_pod(namespace, "user", timeout=180)
    (held,) = cluster.allocation(namespace, "user")
    uuid = device_uuid(cluster, held.node, held.device)

    same_gpu = f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'
    admin = resource_claim("admin", device_request(selector=same_gpu, admin_access=True))
    apply(cluster, namespace, admin, claim_pod("admin", {"resourceClaimName": "admin"}))
    cluster.wait_for_pod(namespace, "admin", timeout=180)

    (result,) = get(cluster, "resourceclaim", "admin", "-n", namespace)["status"]["allocation"]["devices"][
        "results"
    ]
    assert result["adminAccess"] is True
    assert (result["pool"], result["device"]) == (held.node, held.device)
    assert cluster.wait_for_pod(namespace, "user")["status"]["phase"] == "Running"
    claim_uid = get(cluster, "resourceclaim", "admin", "-n", namespace)["metadata"]["uid"]
    view = cluster.container(namespace, "admin", "ctr")
    assert view.cdi_devices == [f"k8s.gpu.nvidia.com/claim={claim_uid}-{held.device}"]
    assert view.gpus == {held.device: uuid}
    assert cluster.container(namespace, "user", "ctr").gpus == {held.device: uuid}
