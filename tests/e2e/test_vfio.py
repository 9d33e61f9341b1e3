"""End-to-end VFIO passthrough (PassthroughSupport=true): a KubeVirt-shaped claim (`deviceClassName:
vfio.gpu.nvidia.com`) allocated by the real scheduler and prepared on a kubelet node of the session cluster
and on a simulated fleet node; a GPU claim for its sibling waits until the VFIO claim is gone.

The fixture restarts the T10 node's plugin with the gate (the flags are every plugin's from then on), gives
the plain worker `worker-1` an H100 in the inventory and restarts the fleet with the gate too; afterwards it
undoes all three and waits for the slices without VFIO devices.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.testing import FakepluginCluster, claim_pod, device_request, resource_claim
from fakeplugin.testing.containers import local_view
from fakeplugin.testing.objects import container, pod
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import T10, cdi_file, our_slices, running, write_inventory

pytestmark = pytest.mark.cluster

GATE = ["--feature-gates=PassthroughSupport=true"]
WORKER = "worker-1"


def devices_of(cluster: FakepluginCluster, node: str) -> dict[str, dict[str, Any]]:
    return {
        d["name"]: d
        for s in our_slices(cluster)
        if s["spec"]["nodeName"] == node
        for d in s["spec"]["devices"]
    }


def restart_fleet(cluster: FakepluginCluster) -> None:
    cluster.local.kill_fleet()
    cluster.local.start_fleet()


@pytest.fixture(scope="module")
def passthrough(cluster: FakepluginCluster) -> Iterator[None]:
    original = cluster.inventory.read_bytes()
    inventory = yaml.safe_load(original)
    worker = next(n for n in inventory["nodes"] if n.get("name") == WORKER)
    worker["gpus"] = [{"profile": "h100-80gb-hbm3"}]
    cluster.restart_plugin(T10, args=GATE)
    write_inventory(cluster.inventory, inventory)
    restart_fleet(cluster)
    try:
        wait_for(
            lambda: (
                {"gpu-vfio-0", "gpu-vfio-1"} <= devices_of(cluster, T10).keys()
                and devices_of(cluster, WORKER).keys() == {"gpu-0", "gpu-vfio-0"}
            ),
            what="VFIO devices on the T10 node and worker-1",
        )
        yield
    finally:
        cluster.inventory.write_bytes(original)
        cluster.restart_plugin(T10, args=[])
        restart_fleet(cluster)
        wait_for(
            lambda: devices_of(cluster, T10).keys() == {"gpu-0", "gpu-1"} and not devices_of(cluster, WORKER),
            what="the T10 node without VFIO devices, worker-1 without GPUs",
        )


def vm_pod(name: str, node: str) -> dict[str, Any]:
    """A KubeVirt-shaped consumer of claim `name` (one device of the VFIO class), on `node`."""
    claims = {"gpu": {"resourceClaimName": name}}
    return pod(name, [container()], claims=claims, nodeSelector={"kubernetes.io/hostname": node})


def claim_of(cluster: FakepluginCluster, namespace: str, name: str) -> dict[str, Any]:
    return get(cluster, "resourceclaim", name, "-n", namespace)


def test_a_vfio_claim_on_a_kubelet_node_excludes_its_gpu_until_deleted(
    cluster: FakepluginCluster, namespace: str, passthrough: None
) -> None:
    vfio = devices_of(cluster, T10)["gpu-vfio-0"]
    bus = vfio["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    assert vfio["attributes"]["uuid"]["string"] == str(uuid.uuid5(uuid.NAMESPACE_DNS, bus))
    assert vfio["attributes"]["type"]["string"] == "vfio"
    gpu = next(
        n
        for n, d in devices_of(cluster, T10).items()
        if d["attributes"]["type"]["string"] == "gpu"
        and d["attributes"]["resource.kubernetes.io/pciBusID"]["string"] == bus
    )

    on_bus = f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus}'"
    vm = resource_claim("vm", device_request("vm", "vfio.gpu.nvidia.com", selector=on_bus))
    apply(cluster, namespace, vm, vm_pod("vm", T10))
    wait_for(lambda: running(cluster, namespace, "vm"), what="the VM pod running")
    claim = claim_of(cluster, namespace, "vm")
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-vfio-0"]
    spec = yaml.safe_load(cdi_file(cluster, T10, claim["metadata"]["uid"]).read_text())
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == ["/dev/vfio/vfio"]  # 25.12
    (device,) = spec["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == ["/dev/vfio/64"]
    view = local_view(cluster.local, namespace, "vm", "ctr")
    assert {"/dev/vfio/vfio", "/dev/vfio/64"} <= set(view.device_nodes)
    wait_for(lambda: gpu not in devices_of(cluster, T10), what=f"{gpu} gone from the T10 node's slice")

    # The GPU behind it: not allocated while the VFIO claim holds it (upstream republishes without it).
    apply(
        cluster,
        namespace,
        resource_claim("gpu", device_request(selector=on_bus)),
        claim_pod("gpu", {"resourceClaimName": "gpu"}),
    )
    wait_for(
        lambda: any(
            c.get("reason") == "Unschedulable"
            for c in get(cluster, "pod", "gpu", "-n", namespace).get("status", {}).get("conditions", [])
        ),
        what="the GPU pod unschedulable",
    )
    cluster.kubectl("delete", "pod", "vm", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(lambda: running(cluster, namespace, "gpu"), what="the GPU pod running once the VM pod is gone")
    assert [
        r["device"] for r in claim_of(cluster, namespace, "gpu")["status"]["allocation"]["devices"]["results"]
    ] == [gpu]


def test_a_vfio_claim_on_a_simulated_node_and_the_fleets_restart(
    cluster: FakepluginCluster, namespace: str, passthrough: None
) -> None:
    vm = resource_claim("vm2", device_request("vm", "vfio.gpu.nvidia.com"))
    apply(cluster, namespace, vm, vm_pod("vm2", WORKER))
    wait_for(lambda: running(cluster, namespace, "vm2"), what="the VM pod running on worker-1")
    claim = claim_of(cluster, namespace, "vm2")
    assert [r["device"] for r in claim["status"]["allocation"]["devices"]["results"]] == ["gpu-vfio-0"]
    path = (
        cluster.layout.root
        / "nodes"
        / WORKER
        / "cdi"
        / f"k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml"
    )
    spec = yaml.safe_load(path.read_text())
    assert [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]] == ["/dev/vfio/64"]
    wait_for(lambda: devices_of(cluster, WORKER).keys() == {"gpu-vfio-0"}, what="worker-1's gpu-0 hidden")

    restart_fleet(cluster)  # kill -9: the GPU is still bound to vfio-pci, so it stays unpublished
    wait_for(
        lambda: devices_of(cluster, WORKER).keys() == {"gpu-vfio-0"} and running(cluster, namespace, "vm2"),
        what="worker-1 still without gpu-0 after the fleet's restart",
    )
    cluster.kubectl("delete", "pod", "vm2", "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for(
        lambda: devices_of(cluster, WORKER).keys() == {"gpu-0", "gpu-vfio-0"}, what="gpu-0 back on worker-1"
    )
