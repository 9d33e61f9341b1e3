"""End-to-end `--device-status` (ours, beyond NVIDIA's releases; docs/compute-domains.md, *Claim device
status*): after Prepare, the claim's status.devices carries an entry per GPU and MIG device of ours
(condition Ready True, data uuid/productName/pciBusID, MIG parentUUID/profile) as the real API server
stores it (`DRAResourceClaimDeviceStatus`: beta and on in 1.34-1.36, GA in 1.37); Unprepare removes
ours.

Its own cluster: a kubelet node (`fakeplugin serve`) with an H200 and an H200 split into two static MIG
devices, and a simulated node (`fakeplugin fleet`) with a T10, both with `--device-status`
(`cluster up --plugin-args --device-status`; the fleet takes it from there too).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.cluster import Cluster
from fakeplugin.kube import Kube, new_api_client
from fakeplugin.testing import claim_pod, device_request, opaque_config, resource_claim
from tests.harness import DRIVER
from tests.harness.host import own_cluster
from tests.harness.kube import apply, get, items, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NODE = "ds-h200"
SIMULATED = "ds-t10"
NAMESPACE = "ds-e2e"
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "name": NODE,
            "gpus": [
                {"profile": "h200"},
                {"profile": "h200", "mig": [{"profile": "3g.71gb"}, {"profile": "4g.71gb"}]},
            ],
        },
        {"name": SIMULATED, "kubelet": False, "gpus": [{"profile": "t10"}]},
    ],
}
H200 = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H200')"
T10 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"
MIG_3G = "device.attributes['gpu.nvidia.com'].profile == '3g.71gb'"
# Sent by kubectl, so stored compact: the status update must send it back byte for byte.
GPU_CONFIG = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}


@pytest.fixture(scope="module")
def ds_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(
        tmp_path_factory, "ds", INVENTORY, NAMESPACE, plugin_args=["--device-status"]
    ) as cluster:
        yield cluster


def claim(cluster: Cluster, name: str) -> dict[str, Any]:
    return get(cluster, "resourceclaim", name, "-n", NAMESPACE)


def ours(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Our entries of the claim's status.devices, by device name."""
    return {d["device"]: d for d in (obj.get("status") or {}).get("devices") or [] if d["driver"] == DRIVER}


def slice_devices(cluster: Cluster, node: str) -> dict[str, dict[str, Any]]:
    found = [s for s in items(cluster, "resourceslices") if s["spec"].get("nodeName") == node]
    return {d["name"]: d for s in found for d in s["spec"]["devices"]}


def attribute(device: dict[str, Any], name: str) -> str:
    return str(device["attributes"][name]["string"])


def run_pod(cluster: Cluster, name: str, *objs: dict[str, Any]) -> None:
    apply(cluster, NAMESPACE, *objs, claim_pod(name, {"resourceClaimName": name}))
    wait_for(
        lambda: pod_phase(cluster, NAMESPACE, name) == "Running", what=f"pod {name} Running", timeout=120
    )


def delete_pod(cluster: Cluster, name: str) -> None:
    cluster.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def test_a_gpu_and_a_mig_device_are_reported_ready_with_their_slice_identity(ds_cluster: Cluster) -> None:
    gpu_claim = resource_claim(
        "both",
        device_request("gpu", selector=H200),
        device_request("mig", "mig.nvidia.com", selector=MIG_3G),
        config=[opaque_config(GPU_CONFIG, requests=["gpu"])],
    )
    run_pod(ds_cluster, "both", gpu_claim)
    obj = claim(ds_cluster, "both")
    results = {r["request"]: r for r in obj["status"]["allocation"]["devices"]["results"]}
    entries = ours(obj)
    assert sorted(entries) == sorted(r["device"] for r in results.values())
    published = slice_devices(ds_cluster, NODE)
    for request, result in results.items():
        entry, device = entries[result["device"]], published[result["device"]]
        assert entry["pool"] == NODE and "shareID" not in entry
        [ready] = entry["conditions"]
        assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "DevicePrepared")
        assert ready["lastTransitionTime"]
        data = entry["data"]
        assert data["uuid"] == attribute(device, "uuid")
        assert data["productName"] == attribute(device, "productName")
        assert data["pciBusID"] == attribute(device, "resource.kubernetes.io/pciBusID")
        assert data["type"] == request
    mig = entries[results["mig"]["device"]]["data"]
    assert mig["uuid"].startswith("MIG-") and mig["profile"] == "3g.71gb"
    assert mig["parentUUID"] == attribute(published[results["mig"]["device"]], "parentUUID")
    assert entries[results["gpu"]["device"]]["data"]["uuid"].startswith("GPU-")

    delete_pod(ds_cluster, "both")
    # Unprepare removed ours, or the claim controller deallocated the claim first (the API server then
    # drops every entry of its devices): either way none is left, and the claim is still there.
    assert ds_cluster.calls(NODE, claim=f"{NAMESPACE}/both", method="NodeUnprepareResources")
    wait_for(lambda: not ours(claim(ds_cluster, "both")), what="no entry of ours after the pod")
    ds_cluster.kubectl("delete", "resourceclaim", "both", "-n", NAMESPACE, "--wait=true")


def test_the_fleet_reports_too_and_its_unprepare_removes_ours_before_deallocation(
    ds_cluster: Cluster,
) -> None:
    run_pod(ds_cluster, "sim", resource_claim("sim", device_request("gpu", selector=T10)))
    obj = claim(ds_cluster, "sim")
    [result] = obj["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == SIMULATED
    [entry] = ours(obj).values()
    assert entry["data"]["uuid"] == attribute(slice_devices(ds_cluster, SIMULATED)[result["device"]], "uuid")
    assert entry["conditions"][0]["status"] == "True"

    # kwok removes a simulated pod only once the fleet unprepared it (fleet.stages), and the claim controller
    # deallocates only once the pod is gone: the claim is seen allocated without our entry in between.
    seen: list[dict[str, Any]] = []
    watcher = threading.Thread(target=watch_claim, args=(ds_cluster, obj, seen), daemon=True)
    watcher.start()
    delete_pod(ds_cluster, "sim")
    watcher.join(timeout=60)
    assert any(o["status"].get("allocation") and not ours(o) for o in seen), [o["status"] for o in seen]
    ds_cluster.kubectl("delete", "resourceclaim", "sim", "-n", NAMESPACE, "--wait=true")


def watch_claim(cluster: Cluster, obj: dict[str, Any], seen: list[dict[str, Any]]) -> None:
    """Every version of the claim from `obj` on, until it is deallocated (or 45 s)."""
    kube = Kube(new_api_client(str(cluster.kubeconfig)))
    path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    meta = obj["metadata"]
    events = kube.watch(
        path,
        resource_version=meta["resourceVersion"],
        timeout_seconds=45,
        field_selector=f"metadata.name={meta['name']}",
    )
    for event in events:
        if event["type"] in ("ADDED", "MODIFIED"):
            seen.append(event["object"])
            if not event["object"]["status"].get("allocation"):
                return


def test_without_the_switch_no_status_devices(ds_cluster: Cluster) -> None:
    ds_cluster.restart_plugin(NODE, args=[])  # the kubelet node's plugin only; last test of the module
    run_pod(ds_cluster, "off", resource_claim("off", device_request("gpu", selector=H200)))
    obj = claim(ds_cluster, "off")
    assert obj["status"]["allocation"]["devices"]["results"][0]["pool"] == NODE
    assert "devices" not in obj["status"]
    delete_pod(ds_cluster, "off")
