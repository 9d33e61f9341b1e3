"""End-to-end: release v0.5.0 publishes the GPUs' NUMA node, the real scheduler allocates by it, and the
fake `nvidia-smi topo -m` in the pod's container agrees.

The fixture gives the seed lab's T10 node two NUMA nodes in the session cluster's inventory (gpu-0 on 0,
gpu-1 on 1: the default spread) and restarts its plugin as `--driver-release=0.5.0` (the release is
read once at start). On Kubernetes 1.36 and later (`FAKEPLUGIN_K8S_VERSION=v1.36.3`: the cluster turns the
alpha gate DRAListTypeAttributes on) the plugin also gets the driver gate DRAListTypeAttributes, so it
publishes the list form `{"ints": [n]}` and the claim selects with `includes()`; before 1.36 the API has no
list attributes, so the plugin publishes the int and the claim compares with `==`. Afterwards the inventory
and the plugin are restored and the slice is re-published under 25.12's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import versions
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.testing import FakepluginCluster, container, device_request, pod, resource_claim
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import T10, allocation, our_slices, running

pytestmark = pytest.mark.cluster

ATTRIBUTE = "resource.kubernetes.io/numaNode"
T10_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"


def list_form(cluster: FakepluginCluster) -> bool:
    """Whether the cluster serves list-valued attributes (k8s 1.36+, gate on: fakeplugin.cluster.versions)."""
    return versions.server_version(cluster.local.kubernetes_version) >= (1, 36)


def t10_numa(cluster: FakepluginCluster) -> dict[str, Any] | None:
    """gpu-0/gpu-1 → numaNode attribute of the T10 pool, once both devices carry one."""
    devices = {
        d["name"]: d["attributes"].get(ATTRIBUTE)
        for s in our_slices(cluster)
        if s["spec"]["nodeName"] == T10
        for d in s["spec"]["devices"]
    }
    return devices if len(devices) == 2 and all(devices.values()) else None


@pytest.fixture
def t10_on_two_numa_nodes(cluster: FakepluginCluster) -> Iterator[None]:
    path, original = cluster.inventory, cluster.inventory.read_bytes()
    inventory = yaml.safe_load(original)
    (node,) = [n for n in inventory["nodes"] if n.get("name") == T10]
    node["numaNodes"] = 2
    write_atomic(path, yaml.safe_dump(inventory, sort_keys=False).encode(), mode=0o644)
    args = ["--driver-release=0.5.0"]
    if list_form(cluster):
        args.append("--feature-gates=DRAListTypeAttributes=true")
    try:
        cluster.restart_plugin(T10, args=args)
        yield
    finally:
        write_atomic(path, original, mode=0o644)
        cluster.restart_plugin(T10, args=[])
        for s in our_slices(cluster):
            if s["spec"]["nodeName"] == T10:
                cluster.kubectl("delete", "resourceslice", s["metadata"]["name"], "--wait=false")
        wait_for(
            lambda: [
                s for s in our_slices(cluster) if s["metadata"]["name"].startswith(f"{T10}-gpu.nvidia.com-")
            ],
            what="the 25.12 plugin's T10 slice again",
            timeout=120,
        )


def test_0_5_0_publishes_numa_node_a_claim_selects_by_it_and_topo_agrees(
    cluster: FakepluginCluster, namespace: str, t10_on_two_numa_nodes: None
) -> None:
    listed = list_form(cluster)
    published = wait_for(lambda: t10_numa(cluster), what=f"{ATTRIBUTE} on both T10 GPUs", timeout=120)
    if listed:
        assert published == {"gpu-0": {"ints": [0]}, "gpu-1": {"ints": [1]}}
        numa_cel = f"device.attributes['resource.kubernetes.io'].numaNode.includes(1) && {T10_CEL}"
    else:
        assert published == {"gpu-0": {"int": 0}, "gpu-1": {"int": 1}}
        numa_cel = f"device.attributes['resource.kubernetes.io'].numaNode == 1 && {T10_CEL}"

    # One container with two claims: one picks the GPU on NUMA node 1, the other takes what is left.
    claims = [
        resource_claim(name, device_request(selector=cel))
        for name, cel in (("numa1", numa_cel), ("other", T10_CEL))
    ]
    topo = pod(
        "topo",
        [container(claims=["numa1", "other"])],
        claims={n: {"resourceClaimName": n} for n in ("numa1", "other")},
    )
    apply(cluster, namespace, *claims, topo)
    wait_for(lambda: running(cluster, namespace, "topo"), what="pod topo Running", timeout=180)
    assert [(r["pool"], r["device"]) for r in allocation(cluster, namespace, "numa1")] == [(T10, "gpu-1")]
    assert [(r["pool"], r["device"]) for r in allocation(cluster, namespace, "other")] == [(T10, "gpu-0")]

    result = cluster.run_in_container_view(namespace, "topo", "ctr", smi.SCRIPT_CONTAINER_PATH, "topo", "-m")
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    # gpu-0 and gpu-1 are GPU0 and GPU1 (minor order); T10s are PCIe cards on two NUMA nodes: SYS. The
    # node has 32 CPUs (16 per GPU), 0-15 on NUMA node 0 and 16-31 on 1.
    assert result.stdout.splitlines()[:3] == [
        "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
        "GPU0\t X \tSYS\t0-15\t0\t\tN/A",
        "GPU1\tSYS\t X \t16-31\t1\t\tN/A",
    ]
    claim = get(cluster, "resourceclaim", "numa1", "-n", namespace)
    assert claim["status"]["allocation"]["devices"]["results"][0]["driver"] == "gpu.nvidia.com"
