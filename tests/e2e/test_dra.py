"""End-to-end: the real kube-scheduler allocates from our slices, the real kubelet prepares through
our plugin, and the fake CRI resolves our CDI specs with the real CDI library.

Runs on the session's seed-lab cluster (tests/e2e/conftest.py): T10 x2 and A5000 x1 on two kubelet
nodes, plus plain kwok-simulated workers. Each test works in its own namespace and gives its GPUs back.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakeplugin.testing import claim_pod, device_request, resource_claim
from fakeplugin.testing.objects import container_gpus
from tests.harness.kube import apply, apply_file, get, items, pod_phase, wait_for
from tests.harness.paths import EXAMPLES
from tests.harness.seedlab import A5000, T10, allocation, cdi_file, our_slices, product_claim, running

pytestmark = pytest.mark.cluster

REAL_DRIVER_KEYS = {
    "type",
    "uuid",
    "productName",
    "brand",
    "architecture",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
}


def slice_device(cluster: Any, node: str, device: str) -> dict[str, Any]:
    for s in our_slices(cluster):
        if s["spec"]["nodeName"] == node:
            for d in s["spec"]["devices"]:
                if d["name"] == device:
                    return d
    raise AssertionError(f"device {device} not published for node {node}")


def pod_claim_name(cluster: Any, namespace: str, pod: str) -> str:
    statuses = get(cluster, "pod", pod, "-n", namespace).get("status", {}).get("resourceClaimStatuses", [])
    return statuses[0]["resourceClaimName"] if statuses else ""


def env_of(record: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in record["env"])


def test_seed_lab_slices_look_like_the_real_driver(cluster):
    classes = {c["metadata"]["name"] for c in items(cluster, "deviceclasses")}
    assert {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"} <= classes

    slices = wait_for(lambda: len(our_slices(cluster)) == 2 and our_slices(cluster), what="two slices")
    by_node = {s["spec"]["nodeName"]: s for s in slices}
    assert set(by_node) == {T10, A5000}
    for node, s in by_node.items():
        assert s["metadata"]["name"].startswith(f"{node}-gpu.nvidia.com-")
        assert s["spec"]["pool"]["name"] == node
        assert s["spec"]["pool"]["resourceSliceCount"] == 1
        owner = s["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("Node", node, True)
        node_uid = get(cluster, "node", node)["metadata"]["uid"]
        assert owner["uid"] == node_uid

    a5000 = by_node[A5000]["spec"]["devices"]
    assert [d["name"] for d in a5000] == ["gpu-0"]
    attrs = a5000[0]["attributes"]
    assert set(attrs) == REAL_DRIVER_KEYS
    assert attrs["productName"] == {"string": "NVIDIA RTX A5000"}
    assert attrs["brand"] == {"string": "NvidiaRTX"}
    assert attrs["architecture"] == {"string": "Ampere"}
    assert attrs["cudaComputeCapability"] == {"version": "8.6.0"}
    assert attrs["driverVersion"] == {"version": "580.126.20"}
    assert attrs["cudaDriverVersion"] == {"version": "13.0.0"}
    assert attrs["type"] == {"string": "gpu"}
    assert attrs["uuid"]["string"].startswith("GPU-")
    assert a5000[0]["capacity"] == {"memory": {"value": "23028Mi"}}

    t10 = by_node[T10]["spec"]["devices"]
    assert sorted(d["name"] for d in t10) == ["gpu-0", "gpu-1"]
    assert {d["attributes"]["productName"]["string"] for d in t10} == {"NVIDIA T10"}
    assert {d["attributes"]["architecture"]["string"] for d in t10} == {"Turing"}
    assert len({d["attributes"]["uuid"]["string"] for d in t10}) == 2


def test_scenario_i_two_containers_share_one_gpu(cluster, namespace):
    docs = apply_file(cluster, namespace, EXAMPLES / "scenario-i.yaml")
    pod = next(d for d in docs if d["kind"] == "Pod")
    containers = [c["name"] for c in pod["spec"]["containers"]]
    assert len(containers) == 2
    name = pod["metadata"]["name"]
    wait_for(lambda: running(cluster, namespace, name), what=f"pod {name} Running")

    results = allocation(cluster, namespace, "must-nvidia-gpu")
    assert len(results) == 1 and results[0]["driver"] == "gpu.nvidia.com"
    node, device = results[0]["pool"], results[0]["device"]
    assert get(cluster, "pod", name, "-n", namespace)["spec"]["nodeName"] == node
    uuid = slice_device(cluster, node, device)["attributes"]["uuid"]["string"]
    claim_uid = get(cluster, "resourceclaim", "must-nvidia-gpu", "-n", namespace)["metadata"]["uid"]

    records = [cluster.container_record(namespace, name, c) for c in containers]
    expected_id = f"k8s.gpu.nvidia.com/claim={claim_uid}-{device}"
    for record in records:
        assert record["cdiDevices"] == [expected_id]
        assert container_gpus(env_of(record)) == {device: uuid}
        assert env_of(record)["NVIDIA_VISIBLE_DEVICES"] == "void"  # NVIDIA's value: CDI brings the devices
    spec = yaml.safe_load(cdi_file(cluster, node, claim_uid).read_text())
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{claim_uid}-{device}"]


def test_template_deployment_spreads_then_queues(cluster, namespace):
    docs = apply_file(cluster, namespace, EXAMPLES / "template-deployment.yaml")
    deployment = next(d for d in docs if d["kind"] == "Deployment")["metadata"]["name"]
    selector = ",".join(
        f"{k}={v}"
        for k, v in next(d for d in docs if d["kind"] == "Deployment")["spec"]["selector"][
            "matchLabels"
        ].items()
    )
    cluster.kubectl("scale", "deployment", deployment, "-n", namespace, "--replicas=3")

    def running_pods() -> list[dict[str, Any]]:
        pods = items(cluster, "pods", "-n", namespace, "-l", selector)
        return [
            p
            for p in pods
            if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]

    pods = wait_for(
        lambda: len(running_pods()) == 3 and running_pods(), what="3 running replicas", timeout=180
    )
    allocated = set()
    for p in pods:
        claim = pod_claim_name(cluster, namespace, p["metadata"]["name"])
        (result,) = allocation(cluster, namespace, claim)
        assert result["pool"] == p["spec"]["nodeName"]
        allocated.add((result["pool"], result["device"]))
    assert allocated == {(T10, "gpu-0"), (T10, "gpu-1"), (A5000, "gpu-0")}

    cluster.kubectl("scale", "deployment", deployment, "-n", namespace, "--replicas=4")

    def unschedulable() -> list[dict[str, Any]]:
        pods = items(cluster, "pods", "-n", namespace, "-l", selector)
        return [
            p
            for p in pods
            if any(
                c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable"
                for c in p.get("status", {}).get("conditions", [])
            )
        ]

    (pending,) = wait_for(unschedulable, what="the 4th replica to be Unschedulable")

    victim = pods[0]
    victim_claim = pod_claim_name(cluster, namespace, victim["metadata"]["name"])
    victim_uid = get(cluster, "resourceclaim", victim_claim, "-n", namespace)["metadata"]["uid"]
    victim_file = cdi_file(cluster, victim["spec"]["nodeName"], victim_uid)
    assert victim_file.exists()
    cluster.kubectl("delete", "pod", victim["metadata"]["name"], "-n", namespace, "--wait=true")
    wait_for(lambda: not victim_file.exists(), what=f"{victim_file} removed by Unprepare")
    wait_for(
        lambda: running(cluster, namespace, pending["metadata"]["name"]),
        what="the queued replica to run once a GPU was freed",
        timeout=180,
    )


def test_cel_selector_picks_the_a5000(cluster, namespace):
    claim = product_claim("a5000", "NVIDIA RTX A5000")
    apply(cluster, namespace, claim, claim_pod("uses-a5000", {"resourceClaimName": "a5000"}))
    wait_for(lambda: running(cluster, namespace, "uses-a5000"), what="A5000 pod Running")
    assert get(cluster, "pod", "uses-a5000", "-n", namespace)["spec"]["nodeName"] == A5000


def test_two_gpus_with_match_attribute_land_on_the_t10_node(cluster, namespace):
    claim = resource_claim(
        "pair",
        device_request(count=2),
        constraints=[{"requests": ["gpu"], "matchAttribute": "gpu.nvidia.com/productName"}],
    )
    apply(cluster, namespace, claim, claim_pod("pair", {"resourceClaimName": "pair"}))
    wait_for(lambda: running(cluster, namespace, "pair"), what="2-GPU pod Running")
    assert get(cluster, "pod", "pair", "-n", namespace)["spec"]["nodeName"] == T10
    results = allocation(cluster, namespace, "pair")
    assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
    record = cluster.container_record(namespace, "pair", "ctr")
    uuids = {slice_device(cluster, T10, d)["attributes"]["uuid"]["string"] for d in ("gpu-0", "gpu-1")}
    assert set(container_gpus(env_of(record)).values()) == uuids
    assert len(record["cdiDevices"]) == 2


def test_plugin_and_kubelet_restarts_keep_claims(cluster, namespace):
    claim = product_claim("keep", "NVIDIA T10")
    apply(cluster, namespace, claim, claim_pod("keep", {"resourceClaimName": "keep"}))
    wait_for(lambda: running(cluster, namespace, "keep"), what="pod Running")
    claim_uid = get(cluster, "resourceclaim", "keep", "-n", namespace)["metadata"]["uid"]
    spec_file = cdi_file(cluster, T10, claim_uid)
    before = spec_file.read_text()

    cluster.restart_plugin(T10)
    wait_for(
        lambda: [s for s in our_slices(cluster) if s["spec"]["nodeName"] == T10],
        what="T10 slice after plugin restart",
    )
    t10_slices = [s for s in our_slices(cluster) if s["spec"]["nodeName"] == T10]
    assert len(t10_slices) == 1, "a plugin restart must not leave duplicate slices"
    assert spec_file.read_text() == before
    assert running(cluster, namespace, "keep")

    second = product_claim("second", "NVIDIA T10")
    apply(cluster, namespace, second, claim_pod("second", {"resourceClaimName": "second"}))
    wait_for(lambda: running(cluster, namespace, "second"), what="a new pod after the plugin restart")

    cluster.restart_kubelet(T10)
    wait_for(
        lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in get(cluster, "node", T10)["status"]["conditions"]
        ),
        what="T10 node Ready again",
    )
    wait_for(
        lambda: [s for s in our_slices(cluster) if s["spec"]["nodeName"] == T10],
        what="T10 slice re-published after the kubelet wiped it",
    )
    assert spec_file.read_text() == before, "re-prepare after a kubelet restart must be idempotent"
    assert running(cluster, namespace, "keep") and running(cluster, namespace, "second")


def test_unsatisfiable_class_stays_pending_with_the_schedulers_reason(cluster, namespace):
    cls = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{namespace}-b200"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": "device.driver == 'gpu.nvidia.com' && "
                        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
                    }
                }
            ]
        },
    }
    apply(cluster, None, cls)
    try:
        apply(
            cluster,
            namespace,
            resource_claim("b200", device_request(device_class=f"{namespace}-b200")),
            claim_pod("b200", {"resourceClaimName": "b200"}),
        )

        def reason() -> str:
            for c in get(cluster, "pod", "b200", "-n", namespace).get("status", {}).get("conditions", []):
                if c["type"] == "PodScheduled" and c["status"] == "False":
                    return c.get("message", "")
            return ""

        message = wait_for(reason, what="PodScheduled=False")
        assert "cannot allocate all claims" in message
        assert pod_phase(cluster, namespace, "b200") == "Pending"
        assert not allocation(cluster, namespace, "b200")
    finally:
        cluster.kubectl("delete", "deviceclass", f"{namespace}-b200", "--wait=false")


def test_deleting_a_claim_in_use_does_not_break_the_node(cluster, namespace):
    claim = product_claim("doomed", "NVIDIA RTX A5000")
    apply(cluster, namespace, claim, claim_pod("holder", {"resourceClaimName": "doomed"}))
    wait_for(lambda: running(cluster, namespace, "holder"), what="holder Running")
    uid = get(cluster, "resourceclaim", "doomed", "-n", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "resourceclaim", "doomed", "-n", namespace, "--wait=false")
    # In use: the claim stays (finalizer + reservedFor) and the pod keeps running.
    assert get(cluster, "resourceclaim", "doomed", "-n", namespace)["metadata"].get("deletionTimestamp")
    assert running(cluster, namespace, "holder")
    cluster.kubectl("delete", "pod", "holder", "-n", namespace, "--wait=true")
    wait_for(lambda: not cdi_file(cluster, A5000, uid).exists(), what="CDI spec of the deleted claim removed")
    wait_for(
        lambda: (
            "doomed" not in {c["metadata"]["name"] for c in items(cluster, "resourceclaims", "-n", namespace)}
        ),
        what="claim gone",
    )
    again = product_claim("again", "NVIDIA RTX A5000")
    apply(cluster, namespace, again, claim_pod("again", {"resourceClaimName": "again"}))
    wait_for(lambda: running(cluster, namespace, "again"), what="a new claim on the same node")
