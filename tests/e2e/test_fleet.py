"""A mixed cluster: the seed lab on real kubelets, 50 simulated H100 nodes and two simulated plain workers
(kwok plays the simulated nodes; one `fakeplugin fleet` publishes their slices and prepares their pods).

Checked: the fleet's slices are what `render` prints for those nodes; a CEL-selected claim lands on a
simulated H100 and its pod runs only once the claim is prepared (CDI spec on disk, in the node's dir);
what its container would get is readable, nvidia-smi included; NVML run as a container of a 2-GPU claim
lists exactly the claim's GPUs (the fleet's plugins get the cluster's mock NVML library); an injected
prepare error keeps the pod Pending with the kubelet's event until the fault is cleared; deleting the
pod unprepares; a pod without claims on a simulated worker runs.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import Cluster
from fakeplugin.inventory import load_inventory
from fakeplugin.render import render_documents
from fakeplugin.testing import claim_pod, device_request, resource_claim_template
from tests.harness import DRIVER
from tests.harness.host import require_cluster_host
from tests.harness.kube import apply, get, items, pod_phase, wait_for
from tests.harness.nvml import PROBE
from tests.harness.paths import EXAMPLES

pytestmark = pytest.mark.cluster

NAMESPACE = "fleet"
H100_NODES = 50
H100_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_cluster_host()
    root = tmp_path_factory.mktemp("fleet")
    inventory = yaml.safe_load((EXAMPLES / "seed-lab.yaml").read_text())
    inventory["nodes"].append(
        {
            "namePrefix": "h100-",
            "replicas": H100_NODES,
            "kubelet": False,
            "labels": {"gpu-type": "h100"},
            "gpus": [{"profile": "h100-80gb-hbm3", "count": 8}],
        }
    )
    path = root / "mixed.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    cluster = Cluster.up(path, root / "state", simulated_nodes=2, watchdog=True)
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        yield cluster
    finally:
        cluster.down()


def h100_claim_template(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return resource_claim_template("h100", device_request(selector=H100_CEL), annotations=annotations)


def claim_of(cluster: Cluster, pod: str) -> dict[str, Any]:
    (status,) = get(cluster, "pod", pod, "-n", NAMESPACE)["status"]["resourceClaimStatuses"]
    return get(cluster, "resourceclaim", status["resourceClaimName"], "-n", NAMESPACE)


def cdi_spec(cluster: Cluster, node: str, claim_uid: str) -> Path:
    return cluster.layout.root / "nodes" / node / "cdi" / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml"


def delete_pod(cluster: Cluster, pod: str) -> None:
    cluster.kubectl("delete", "pod", pod, "-n", NAMESPACE, "--wait=true", "--timeout=60s")


def test_simulated_slices_are_what_render_prints(mixed: Cluster) -> None:
    inventory = load_inventory(mixed.inventory)
    slices = {
        s["spec"]["nodeName"]: s
        for s in items(mixed, "resourceslices")
        if s["spec"]["nodeName"].startswith("h100-")
    }
    assert sorted(slices) == sorted(f"h100-{i}" for i in range(H100_NODES))
    for node in ("h100-0", "h100-17", f"h100-{H100_NODES - 1}"):
        uid = get(mixed, "node", node)["metadata"]["uid"]
        (rendered,) = [
            d
            for d in render_documents(inventory, node=node, labels={"gpu-type": "h100"}, node_uid=uid)
            if d["kind"] == "ResourceSlice"
        ]
        published = slices[node]
        assert published["spec"] == rendered["spec"], node
        assert published["metadata"]["ownerReferences"] == rendered["metadata"]["ownerReferences"]
        assert len(published["spec"]["devices"]) == 8


def test_a_deleted_slice_of_a_simulated_node_comes_back(mixed: Cluster) -> None:
    (old,) = [s for s in items(mixed, "resourceslices") if s["spec"]["nodeName"] == "h100-3"]
    mixed.kubectl("delete", "resourceslice", old["metadata"]["name"])

    def back() -> list[dict[str, Any]]:
        return [
            s
            for s in items(mixed, "resourceslices")
            if s["spec"]["nodeName"] == "h100-3" and s["metadata"]["uid"] != old["metadata"]["uid"]
        ]

    (new,) = wait_for(back, what="the fleet to publish h100-3's slice again")
    assert new["spec"]["devices"] == old["spec"]["devices"]


def test_cel_claim_runs_on_a_simulated_h100_only_after_prepare(mixed: Cluster) -> None:
    # The delay holds prepare open: the pod is bound but must stay Pending, with no CDI spec yet.
    apply(mixed, NAMESPACE, h100_claim_template({"fakeplugin.dev/prepare-delay": "4s"}))
    apply(mixed, NAMESPACE, claim_pod("p", {"resourceClaimTemplateName": "h100"}))
    node = wait_for(
        lambda: get(mixed, "pod", "p", "-n", NAMESPACE)["spec"].get("nodeName"), what="pod p bound"
    )
    assert node.startswith("h100-")
    claim = claim_of(mixed, "p")
    assert pod_phase(mixed, NAMESPACE, "p") == "Pending"
    assert not cdi_spec(mixed, node, claim["metadata"]["uid"]).exists()

    wait_for(lambda: pod_phase(mixed, NAMESPACE, "p") == "Running", what="pod p Running")
    spec = yaml.safe_load(cdi_spec(mixed, node, claim["metadata"]["uid"]).read_text())
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == node
    (slice_obj,) = [s for s in items(mixed, "resourceslices") if s["spec"]["nodeName"] == node]
    device = next(d for d in slice_obj["spec"]["devices"] if d["name"] == result["device"])
    uuid = device["attributes"]["uuid"]["string"]
    assert [d["name"] for d in spec["devices"]] == [f"{claim['metadata']['uid']}-{result['device']}"]

    record = mixed.container_record(NAMESPACE, "p", "ctr")
    assert record["cdiDevices"] == [f"k8s.gpu.nvidia.com/claim={claim['metadata']['uid']}-{result['device']}"]
    minor = result["device"].removeprefix("gpu-")
    assert {"NVIDIA_VISIBLE_DEVICES=void", f"FAKEPLUGIN_GPU_{minor}_UUID={uuid}"} <= set(record["env"])
    listed = mixed.run_in_container_view(NAMESPACE, "p", "ctr", "/usr/bin/nvidia-smi", "-L")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})"

    delete_pod(mixed, "p")
    assert not cdi_spec(mixed, node, claim["metadata"]["uid"]).exists()
    checkpoint = json.loads(
        (mixed.layout.root / "nodes" / node / "plugins" / DRIVER / "checkpoint.json").read_text()
    )
    assert claim["metadata"]["uid"] not in json.dumps(checkpoint)
    mixed.kubectl("delete", "resourceclaimtemplate", "h100", "-n", NAMESPACE)


def test_nvml_run_as_a_simulated_nodes_container_lists_exactly_its_claims_two_gpus(mixed: Cluster) -> None:
    # The fleet's GPU plugins get the cluster's mock NVML library as the kubelet nodes' do: the probe, run
    # as the container, sees the claim's two GPUs of the simulated node's slice, no other.
    template = resource_claim_template("two", device_request(selector=H100_CEL, count=2))
    apply(mixed, NAMESPACE, template)
    apply(mixed, NAMESPACE, claim_pod("nvml", {"resourceClaimTemplateName": "two"}))
    wait_for(lambda: pod_phase(mixed, NAMESPACE, "nvml") == "Running", what="pod nvml Running")
    node = get(mixed, "pod", "nvml", "-n", NAMESPACE)["spec"]["nodeName"]
    results = claim_of(mixed, "nvml")["status"]["allocation"]["devices"]["results"]
    (slice_obj,) = [s for s in items(mixed, "resourceslices") if s["spec"]["nodeName"] == node]
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in slice_obj["spec"]["devices"]}

    done = mixed.run_as_container(NAMESPACE, "nvml", "ctr", [sys.executable, str(PROBE)])
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["init"], seen["count"]) == (0, 2)
    assert sorted(g["uuid"] for g in seen["gpus"]) == sorted(uuids[r["device"]] for r in results)
    assert {g["name"] for g in seen["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    delete_pod(mixed, "nvml")
    mixed.kubectl("delete", "resourceclaimtemplate", "two", "-n", NAMESPACE)


def test_prepare_error_keeps_the_pod_pending_with_the_kubelet_event(mixed: Cluster) -> None:
    apply(
        mixed,
        NAMESPACE,
        h100_claim_template({"fakeplugin.dev/prepare-error": "injected: GPU fell off the bus"}),
    )
    apply(mixed, NAMESPACE, claim_pod("bad", {"resourceClaimTemplateName": "h100"}))
    pod_uid = get(mixed, "pod", "bad", "-n", NAMESPACE)["metadata"]["uid"]

    def events() -> list[str]:
        found = items(mixed, "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.uid={pod_uid}")
        return [e["message"] for e in found if e["reason"] == "FailedPrepareDynamicResources"]

    messages = wait_for(events, what="a FailedPrepareDynamicResources event")
    claim_name = claim_of(mixed, "bad")["metadata"]["name"]
    assert messages[0].startswith(
        "Failed to prepare dynamic resources: prepare dynamic resources: "
        f"NodePrepareResources failed for ResourceClaim {claim_name}: "
    )
    assert "injected: GPU fell off the bus" in messages[0]
    assert pod_phase(mixed, NAMESPACE, "bad") == "Pending"

    # Cleared: the fleet retries (with backoff, as a kubelet retries on pod sync) and the pod starts.
    mixed.kubectl("annotate", "resourceclaim", claim_name, "-n", NAMESPACE, "fakeplugin.dev/prepare-error-")
    wait_for(lambda: pod_phase(mixed, NAMESPACE, "bad") == "Running", what="pod bad Running", timeout=90)
    delete_pod(mixed, "bad")
    mixed.kubectl("delete", "resourceclaimtemplate", "h100", "-n", NAMESPACE)


def test_a_pod_without_claims_runs_on_a_simulated_worker(mixed: Cluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "worker-1"},
            "containers": [{"name": "ctr", "image": "busybox:1.36"}],
        },
    }
    apply(mixed, NAMESPACE, pod)
    wait_for(lambda: pod_phase(mixed, NAMESPACE, "plain") == "Running", what="pod plain Running")
    status = get(mixed, "pod", "plain", "-n", NAMESPACE)["status"]
    assert [c["name"] for c in status["containerStatuses"] if c["ready"]] == ["ctr"]
    delete_pod(mixed, "plain")
    assert not [p for p in items(mixed, "pods", "-n", NAMESPACE) if p["metadata"]["name"] == "plain"]


OWNED = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "namePrefix": "owned-",
            "replicas": 3,
            "kubelet": False,
            "labels": {"pool": "owned", "zone": "z1"},
            "gpus": [{"profile": "h200", "count": 1}],
        }
    ],
}


def owned_nodes(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in items(cluster, "nodes", "-l", "fakeplugin.dev/fleet=e2e")}


def test_a_fleet_that_owns_its_nodes_creates_relabels_deletes_and_the_gc_removes_them(
    mixed: Cluster, tmp_path: Path
) -> None:
    """fleet --create-nodes (NodeOwner) on the real API server: the inventory's Nodes created, with kwok's
    annotation and an ownerReference to a ClusterRole; an inventory edit relabels and deletes; a Node of
    one of its names that it did not make is left alone; deleting the ClusterRole makes the real garbage
    collector delete every Node it owns."""
    from fakeplugin.fleet.api import FleetKube
    from fakeplugin.fleet.nodeobjects import NodeOwner, cluster_role_owner
    from fakeplugin.inventory.file import InventoryFile
    from fakeplugin.kube import new_api_client

    path = tmp_path / "owned.yaml"
    path.write_text(yaml.safe_dump(OWNED))
    mixed.kubectl("create", "clusterrole", "e2e-fleet-owner", "--verb=get", "--resource=nodes")
    kube = FleetKube(new_api_client(str(mixed.kubeconfig)))
    foreign = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "owned-2", "labels": {"mine": "yes"}}}
    mixed.kubectl("create", "-f", "-", input=json.dumps(foreign))
    try:
        inventory = InventoryFile(path)
        owner = NodeOwner(
            kube,
            inventory,
            owner="e2e",
            owns=lambda _: True,
            owner_ref=cluster_role_owner(kube, "e2e-fleet-owner"),
        )
        assert owner.sync() == (2, 0, 0)  # owned-2 is someone else's
        nodes = owned_nodes(mixed)
        assert sorted(nodes) == ["owned-0", "owned-1"]
        meta = nodes["owned-0"]["metadata"]
        assert meta["labels"]["pool"] == "owned" and meta["labels"]["zone"] == "z1"
        assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert [r["kind"] + "/" + r["name"] for r in meta["ownerReferences"]] == [
            "ClusterRole/e2e-fleet-owner"
        ]
        assert get(mixed, "node", "owned-2")["metadata"]["labels"].get("mine") == "yes"  # untouched
        # kwok plays them: Ready.
        wait_for(
            lambda: all(
                any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
                for n in owned_nodes(mixed).values()
            ),
            what="the owned Nodes Ready",
        )
        assert owner.sync() == (0, 0, 0)

        edited = yaml.safe_load(path.read_text())
        edited["nodes"][0]["replicas"] = 1
        edited["nodes"][0]["labels"] = {"pool": "owned"}
        path.write_text(yaml.safe_dump(edited))
        assert inventory.reload_if_changed()
        assert owner.sync() == (0, 1, 1)
        nodes = owned_nodes(mixed)
        assert sorted(nodes) == ["owned-0"]
        assert "zone" not in nodes["owned-0"]["metadata"]["labels"]

        mixed.kubectl("delete", "clusterrole", "e2e-fleet-owner")
        wait_for(lambda: not owned_nodes(mixed), what="the garbage collector deleting the owned Nodes")
        assert get(mixed, "node", "owned-2")["metadata"]["name"] == "owned-2"
    finally:
        mixed.kubectl("delete", "clusterrole", "e2e-fleet-owner", "--ignore-not-found")
        mixed.kubectl("delete", "node", "owned-0", "owned-1", "owned-2", "--ignore-not-found")
