"""End-to-end DynamicMIG: the real kube-scheduler (DRAPartitionableDevices) allocates H200 partitions from
our counters, the real kubelet prepares them through our plugin (DynamicMIG=true).

The session's seed lab has no MIG GPU, so this module starts a second, small cluster: one kubelet node
with two H200, its plugin running with DynamicMIG=true.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import Cluster, versions
from fakeplugin.inventory import parse_inventory
from fakeplugin.mig import mig_uuid
from fakeplugin.render import render_documents
from fakeplugin.testing import claim_pod, device_request, resource_claim
from fakeplugin.testing.objects import container_gpus
from tests.harness.host import require_cluster_host
from tests.harness.kube import apply, get, items, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NODE = "h200-mig"
NAMESPACE = "mig"
INVENTORY = {
    "driverVersion": "580.159.04",
    "cudaDriverVersion": "13.0",
    "nodes": [{"name": NODE, "gpus": [{"profile": "h200", "count": 2}]}],
}


@pytest.fixture(scope="module")
def mig_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_cluster_host()
    root = tmp_path_factory.mktemp("mig")
    inventory = root / "h200-mig.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY, sort_keys=False))
    # Default Kubernetes gates include DRAPartitionableDevices.
    cluster = Cluster.up(
        inventory, root / "state", plugin_args=["--feature-gates=DynamicMIG=true"], watchdog=True
    )
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        yield cluster
    finally:
        cluster.down()


def node_slices(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        s
        for s in items(cluster, "resourceslices")
        if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"]["nodeName"] == NODE
    ]


def device(cluster: Cluster, name: str) -> dict[str, Any]:
    return next(d for s in node_slices(cluster) for d in s["spec"].get("devices", []) if d["name"] == name)


def partition_claim(name: str, profile: str, bus_id: str) -> dict[str, Any]:
    """A claim for one `profile` partition of the GPU at `bus_id`."""
    cel = (
        f"device.attributes['gpu.nvidia.com'].profile == '{profile}' && "
        f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus_id}'"
    )
    return resource_claim(name, device_request(device_class="mig.nvidia.com", selector=cel))


def allocated(cluster: Cluster, claim: str) -> list[str]:
    status = get(cluster, "resourceclaim", claim, "-n", NAMESPACE).get("status", {})
    return [r["device"] for r in status.get("allocation", {}).get("devices", {}).get("results", [])]


def running(cluster: Cluster, pod: str) -> bool:
    return pod_phase(cluster, NAMESPACE, pod) == "Running"


def unschedulable_message(cluster: Cluster, pod: str) -> str:
    for c in get(cluster, "pod", pod, "-n", NAMESPACE).get("status", {}).get("conditions", []):
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
            return c.get("message", "")
    return ""


def test_slices_as_published_by_the_api_server(mig_cluster: Cluster) -> None:
    server = versions.server_version(mig_cluster.kubernetes_version)
    split = server >= (1, 35)  # the real driver's rule, by the API server's version
    count = 3 if split else 2
    slices = wait_for(
        lambda: len(node_slices(mig_cluster)) == count and node_slices(mig_cluster), what=f"{count} slices"
    )
    counters = [s for s in slices if "sharedCounters" in s["spec"]]
    with_devices = [s for s in slices if s["spec"].get("devices")]
    if split:
        assert len(counters) == 1 and len(with_devices) == 2
        assert not any("devices" in s["spec"] for s in counters), (
            "1.35: counters and devices never share a slice"
        )
        assert [c["name"] for c in counters[0]["spec"]["sharedCounters"]] == [
            "gpu-0-counter-set",
            "gpu-1-counter-set",
        ]
    else:  # before 1.35: each GPU's slice holds its counter set and its devices
        assert counters == with_devices and len(counters) == 2
        assert sorted(c["name"] for s in counters for c in s["spec"]["sharedCounters"]) == [
            "gpu-0-counter-set",
            "gpu-1-counter-set",
        ]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {count}
    assert len({s["spec"]["pool"]["generation"] for s in slices}) == 1
    assert sorted(len(s["spec"]["devices"]) for s in with_devices) == [26, 26]

    # The API server keeps every field as sent (DRAPartitionableDevices on), so the publisher sees no
    # difference to its desired state and never rewrites the slices.
    node_uid = get(mig_cluster, "node", NODE)["metadata"]["uid"]
    desired = render_documents(
        parse_inventory(INVENTORY), node=NODE, node_uid=node_uid, dynamic_mig=True, server_version=server
    )[3:]

    def content(s: dict[str, Any]) -> dict[str, Any]:
        spec = {k: v for k, v in s["spec"].items() if k != "pool"}
        return {"spec": spec, "owners": s["metadata"]["ownerReferences"]}

    key = yaml.safe_dump
    assert sorted(map(key, map(content, slices))) == sorted(map(key, map(content, desired)))


def test_3g_and_4g_share_a_gpu_and_an_overlap_is_refused(mig_cluster: Cluster) -> None:
    gpu0 = wait_for(lambda: node_slices(mig_cluster) and device(mig_cluster, "gpu-0"), what="gpu-0 published")
    bus = gpu0["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
    parent = gpu0["attributes"]["uuid"]["string"]

    # 4g.71gb has one placement (memory slices 0-3); once it holds them, 3g.71gb can only go to 4-7.
    apply(
        mig_cluster,
        NAMESPACE,
        partition_claim("four", "4g.71gb", bus),
        claim_pod("four", {"resourceClaimName": "four"}),
    )
    wait_for(lambda: running(mig_cluster, "four"), what="the 4g.71gb pod Running")
    apply(mig_cluster, NAMESPACE, partition_claim("three", "3g.71gb", bus),
          claim_pod("three", {"resourceClaimName": "three"}))  # fmt: skip
    wait_for(lambda: running(mig_cluster, "three"), what="the 3g.71gb pod Running")
    assert allocated(mig_cluster, "four") == ["gpu-0-mig-4g71gb-5-0"]
    assert allocated(mig_cluster, "three") == ["gpu-0-mig-3g71gb-9-4"]
    assert device(mig_cluster, "gpu-0-mig-3g71gb-9-4")["attributes"]["parentUUID"] == {"string": parent}

    # Prepared as a created MIG device: the CDI spec gives the container the MIG UUID.
    three_uid = get(mig_cluster, "resourceclaim", "three", "-n", NAMESPACE)["metadata"]["uid"]
    record = mig_cluster.container_record(NAMESPACE, "three", "ctr")
    assert record["cdiDevices"] == [f"k8s.gpu.nvidia.com/claim={three_uid}-gpu-0-mig-3g71gb-9-4"]
    env = dict(item.split("=", 1) for item in record["env"])
    assert container_gpus(env) == {"gpu-0-mig-3g71gb-9-4": mig_uuid(parent, 9, 4, three_uid)}
    assert env["FAKEPLUGIN_GPU_0_MIG_9_4_UUID"] == mig_uuid(parent, 9, 4, three_uid)

    # Every memory slice of gpu-0 is taken: another 3g.71gb there (at 0 or 4) overlaps and is refused.
    apply(mig_cluster, NAMESPACE, partition_claim("overlap", "3g.71gb", bus),
          claim_pod("overlap", {"resourceClaimName": "overlap"}))  # fmt: skip
    message = wait_for(
        lambda: unschedulable_message(mig_cluster, "overlap"), what="the overlapping pod refused"
    )
    assert "cannot allocate all claims" in message
    assert allocated(mig_cluster, "overlap") == []

    # Freeing the 4g.71gb gives its counters back: the waiting claim gets memory slices 0-3.
    mig_cluster.kubectl("delete", "pod", "four", "-n", NAMESPACE, "--wait=true")
    wait_for(lambda: running(mig_cluster, "overlap"), what="the waiting 3g.71gb pod Running", timeout=180)
    assert allocated(mig_cluster, "overlap") == ["gpu-0-mig-3g71gb-9-0"]
