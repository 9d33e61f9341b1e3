"""ComputeDomains at rack scale: two simulated NVL72 racks, a GB200 and a GB300 one (2 x 18 nodes x 4 GPUs,
kwok plays the nodes, `fakeplugin fleet --compute-domains` is both kubelet plugins of each and plays each
IMEX daemon) and two kubelet nodes of a third clique, as `fakeplugin cluster up` deploys them for this
inventory.

Checked, as NVIDIA's tests/bats/test_cd_misc.bats checks it on real racks, plus what needs many nodes:
- NVIDIA's demo/specs/imex/channel-injection{,-all}.yaml, unchanged, on a simulated rack node: the pod runs
  with channel0 (channel2047), the CD is Ready with that node, and loses it when the pod goes;
- a 16-node job (16 pods x 4 GPUs + one channel each) on rack A and an 18-node job on rack B at once,
  its claims selecting GB300s by CEL:
  while the daemons are held NotReady (our fault) no pod runs and each CD lists its nodes NotReady; once
  they are Ready every pod runs, each CD is Ready with its nodes in its own clique, and after the pods go
  the nodes leave and the CDs are NotReady;
- a 2-node CD across the two kubelet nodes: both pods run with channel0 in their container records;
- a node that leaves its clique (the fault, on a rack node and on a kubelet node): gone from the CD, which
  turns NotReady, while its pod runs on; back at index 0 and the CD Ready once the fault is cleared;
- a 20-node job whose pods must share a clique (required pod affinity on `nvidia.com/gpu.clique`, the
  placement of the gang job in KAI-Scheduler #1217): 18 pods fit a rack, 2 stay unschedulable, the CD
  stays NotReady with 18 Ready nodes: a rack has 18 compute trays, on real hardware as here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import Cluster
from fakeplugin.faults.daemonfaults import NOT_READY_ANNOTATION
from fakeplugin.testing import Faults, container, device_request, pod, resource_claim
from fakeplugin.testing.containers import local_view
from tests.harness import DRIVER
from tests.harness.domains import (
    CHANNEL_INJECTION,
    SPECS,
    cd_status,
    channel_injection_ran,
    ready_status,
    start_domain_job,
)
from tests.harness.host import own_cluster
from tests.harness.kube import apply_file, get, items, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "cd-fleet"
RACK_A, RACK_B, TRAYS = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91", "9d0c1b2a-3e4f-4a5b-8c6d-7e8f9a0b1c2d", 18
LOCAL = "6a7b8c9d-0e1f-4a2b-9c3d-4e5f6a7b8c9d"
KUBELET_NODES = ("gb200-tray-0", "gb200-tray-1")


GB300 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA GB300"'


def rack(prefix: str, cluster_uuid: str, profile: str) -> dict[str, Any]:
    """An NVL72 rack: 18 compute trays of 4 GPUs of `profile` in one NVLink domain (clique 1)."""
    return {
        "namePrefix": prefix,
        "replicas": TRAYS,
        "kubelet": False,
        "gpus": [{"profile": profile, "count": 4}],
        "fabric": {"clique": 1, "clusterUUID": cluster_uuid},
    }


INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        rack("rack-a-", RACK_A, "gb200"),
        rack("rack-b-", RACK_B, "gb300"),
        *(
            {
                "name": n,
                "gpus": [{"profile": "gb200", "count": 4}],
                "fabric": {"clique": 3, "clusterUUID": LOCAL},
            }
            for n in KUBELET_NODES
        ),
    ],
}


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(tmp_path_factory, "cd-fleet", INVENTORY, NAMESPACE) as cluster:
        yield cluster


def compute_domain(name: str, nodes: int) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": api.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def job(
    name: str, pods: int, *, gpus: int = 4, selector: str | None = None, **placement: Any
) -> list[dict[str, Any]]:
    """A CD of `pods` nodes and its worker pods: each takes `gpus` GPUs that meet the CEL `selector` (a
    claim of its own, by name) and the CD's channel (its template), placed by `placement` (PodSpec fields).
    One template per pod, not two: a pod naming two ResourceClaimTemplates can keep one of them out of its
    resourceClaimStatuses for good on 1.35.4 under load (kube-controller-manager logs "ResourceClaim not
    created yet" while the claim exists, allocated: kubernetes/kubernetes#138407; seen here and in
    bench/compute_domains.py)."""
    objects: list[dict[str, Any]] = [compute_domain(name, pods)]
    for i in range(pods):
        objects.append(resource_claim(f"{name}-{i}-gpus", device_request(count=gpus, selector=selector)))
        objects.append(
            pod(
                f"{name}-{i}",
                [container("worker", claims=["gpus", "channel"])],
                claims={
                    "gpus": {"resourceClaimName": f"{name}-{i}-gpus"},
                    "channel": {"resourceClaimTemplateName": f"{name}-channel"},
                },
                **placement,
            )
        )
    return objects


def on_clique(clique: str) -> dict[str, Any]:
    return {"nodeSelector": {api.GPU_CLIQUE_LABEL: clique}}


def phases(cluster: Cluster, name: str) -> dict[str, str]:
    """Pod name → phase, for the pods of job `name`."""
    return {
        p["metadata"]["name"]: p["status"].get("phase", "")
        for p in items(cluster, "pods", "-n", NAMESPACE)
        if p["metadata"]["name"].startswith(f"{name}-")
    }


def pod_nodes(cluster: Cluster, name: str) -> set[str]:
    return {
        p["spec"].get("nodeName", "")
        for p in items(cluster, "pods", "-n", NAMESPACE)
        if p["metadata"]["name"].startswith(f"{name}-")
    }


def allocated(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    """(pool, device) of every GPU allocated to the claims of job `name`."""
    return [
        (r["pool"], r["device"])
        for c in items(cluster, "resourceclaims", "-n", NAMESPACE)
        if c["metadata"]["name"].startswith(f"{name}-") and c["metadata"]["name"].endswith("-gpus")
        for r in c["status"]["allocation"]["devices"]["results"]
    ]


def delete_job(cluster: Cluster, name: str) -> None:
    pods = list(phases(cluster, name))
    if pods:
        cluster.kubectl("delete", "pod", *pods, "-n", NAMESPACE, "--wait=true", "--timeout=300s")
    cluster.kubectl("delete", "computedomain", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    claims = [c["metadata"]["name"] for c in items(cluster, "resourceclaims", "-n", NAMESPACE)]
    ours = [c for c in claims if c.startswith(f"{name}-") and c.endswith("-gpus")]
    if ours:
        cluster.kubectl("delete", "resourceclaim", *ours, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def fault_racks(cluster: Cluster, on: bool) -> None:
    nodes = [f"{p}{i}" for p in ("rack-a-", "rack-b-") for i in range(TRAYS)]
    value = f"{NOT_READY_ANNOTATION}=e2e" if on else f"{NOT_READY_ANNOTATION}-"
    cluster.kubectl("annotate", "node", *nodes, value, "--overwrite")


def test_the_fleet_publishes_channels_and_daemons_on_every_rack_node(racks: Cluster) -> None:
    slices = [s for s in items(racks, "resourceslices") if s["spec"]["driver"] == api.DRIVER_NAME]
    nodes = {s["spec"]["nodeName"] for s in slices}
    assert {f"rack-{r}-{i}" for r in "ab" for i in range(TRAYS)} | set(KUBELET_NODES) <= nodes
    rack_b = next(s for s in slices if s["spec"]["nodeName"] == "rack-b-7")
    assert sorted(d["name"] for d in rack_b["spec"]["devices"]) == ["channel-0", "daemon-0"]
    assert get(racks, "node", "rack-b-7")["metadata"]["labels"][api.GPU_CLIQUE_LABEL] == f"{RACK_B}.1"
    gpus = {
        s["spec"]["nodeName"]: [d["attributes"] for d in s["spec"]["devices"]]
        for s in items(racks, "resourceslices")
        if s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] in ("rack-a-7", "rack-b-7")
    }
    for node, product, capability in (
        ("rack-a-7", "NVIDIA GB200", "10.0"),
        ("rack-b-7", "NVIDIA GB300", "10.3"),
    ):
        assert len(gpus[node]) == 4
        for attributes in gpus[node]:
            assert attributes["productName"] == {"string": product}
            assert attributes["architecture"] == {"string": "Blackwell"}
            assert attributes["cudaComputeCapability"] == {"version": f"{capability}.0"}


@pytest.mark.parametrize(("spec", "channel"), CHANNEL_INJECTION)
def test_nvidias_channel_injection_demo_on_a_simulated_rack(racks: Cluster, spec: str, channel: str) -> None:
    racks.kubectl("cordon", *KUBELET_NODES)  # NVIDIA's pod names no node: keep it on the racks
    try:
        cd, workload = apply_file(racks, NAMESPACE, SPECS / spec)
        name, pod_name = cd["metadata"]["name"], workload["metadata"]["name"]
        node = wait_for(
            lambda: get(racks, "pod", pod_name, "-n", NAMESPACE)["spec"].get("nodeName"),
            what=f"pod {pod_name} bound",
            timeout=60,
        )
    finally:
        racks.kubectl("uncordon", *KUBELET_NODES)
    assert node.startswith(("rack-a-", "rack-b-"))
    assert channel_injection_ran(racks, NAMESPACE, name, pod_name, channel)["name"] == node


def test_two_jobs_on_two_racks_run_only_once_their_daemons_are_ready(racks: Cluster) -> None:
    fault_racks(racks, True)
    try:
        start_domain_job(racks, NAMESPACE, job("job-a", 16, **on_clique(f"{RACK_A}.1")))
        start_domain_job(racks, NAMESPACE, job("job-b", 18, selector=GB300, **on_clique(f"{RACK_B}.1")))

        def all_listed(name: str, count: int) -> dict[str, Any] | None:
            s = cd_status(racks, NAMESPACE, name)
            return s if len(s.get("nodes") or []) == count else None

        for name, count in (("job-a", 16), ("job-b", 18)):
            status = wait_for(
                lambda n=name, c=count: all_listed(n, c),  # type: ignore[misc]
                what=f"every daemon of {name} in its clique",
                timeout=300,
            )
            assert status["status"] == api.STATUS_NOT_READY
            assert {n["status"] for n in status["nodes"]} == {"NotReady"}
        assert set(phases(racks, "job-a").values()) == {"Pending"}  # their channel claims wait
        assert set(phases(racks, "job-b").values()) == {"Pending"}
    finally:
        fault_racks(racks, False)

    for name, count in (("job-a", 16), ("job-b", 18)):
        wait_for(
            lambda n=name: set(phases(racks, n).values()) == {"Running"},  # type: ignore[misc]
            what=f"every pod of {name} Running",
            timeout=300,
        )
        # A pod runs once its own node's daemon is Ready in the clique (isCurrentNodeReady); the controller
        # writes the domain's status on its next 2 s sync (docs/compute-domains.md).
        status = wait_for(
            lambda n=name: ready_status(racks, NAMESPACE, n),  # type: ignore[misc]
            what=f"{name} Ready once its pods run",
            timeout=30,
        )
        assert len(status["nodes"]) == count
        assert {n["status"] for n in status["nodes"]} == {"Ready"}
        clique = f"{RACK_A if name == 'job-a' else RACK_B}.1"
        assert {n["cliqueID"] for n in status["nodes"]} == {clique}
        assert {n["name"] for n in status["nodes"]} == pod_nodes(racks, name)
        assert sorted(n["index"] for n in status["nodes"]) == list(range(count))
    assert {pool for pool, _ in allocated(racks, "job-b")} == {f"rack-b-{i}" for i in range(TRAYS)}

    delete_job(racks, "job-b")
    status = wait_for(
        lambda: ready_status(racks, NAMESPACE, "job-a"),
        what="job-a still Ready once job-b is gone",
        timeout=10,
    )
    assert len(status["nodes"]) == 16
    pods = list(phases(racks, "job-a"))
    racks.kubectl("delete", "pod", *pods, "-n", NAMESPACE, "--wait=true", "--timeout=300s")
    wait_for(
        lambda: (
            "nodes" not in (s := cd_status(racks, NAMESPACE, "job-a"))
            and s.get("status") == api.STATUS_NOT_READY
        ),
        what="job-a's nodes gone from its status once its pods are",
        timeout=180,
    )
    delete_job(racks, "job-a")


def test_a_two_node_domain_across_kubelet_nodes(racks: Cluster) -> None:
    start_domain_job(racks, NAMESPACE, job("pair", 2, **on_clique(f"{LOCAL}.3")))
    wait_for(
        lambda: set(phases(racks, "pair").values()) == {"Running"},
        what="both pods of the 2-node domain Running",
        timeout=300,
    )
    assert pod_nodes(racks, "pair") == set(KUBELET_NODES)
    for i in range(2):
        view = local_view(racks, NAMESPACE, f"pair-{i}", "worker")
        assert "/dev/nvidia-caps-imex-channels/channel0" in view.device_nodes
    status = wait_for(
        lambda: ready_status(racks, NAMESPACE, "pair"),
        what="the 2-node domain Ready",
        timeout=60,
    )
    assert {(n["name"], n["cliqueID"]) for n in status["nodes"]} == {(n, f"{LOCAL}.3") for n in KUBELET_NODES}
    delete_job(racks, "pair")


@pytest.mark.parametrize("node", ["rack-b-3", "gb200-tray-1"])
def test_a_node_that_leaves_its_clique_leaves_the_domain_until_it_comes_back(
    racks: Cluster, node: str
) -> None:
    """The left-clique fault through the testing API (fakeplugin.testing.Faults), on a simulated rack node
    (the fleet's daemon) and on a kubelet node (the plugin's --emulate-daemon)."""
    faults = Faults(racks.kubectl)
    start_domain_job(racks, NAMESPACE, job("solo", 1, nodeSelector={"kubernetes.io/hostname": node}))
    wait_for(lambda: ready_status(racks, NAMESPACE, "solo"), what="the 1-node domain Ready", timeout=120)
    faults.leave_clique(node, "tray lost its NVLink")
    try:

        def without_nodes() -> dict[str, Any] | None:
            status = cd_status(racks, NAMESPACE, "solo")
            return None if status.get("nodes") else status

        status = wait_for(without_nodes, what=f"{node} gone from the domain", timeout=60)
        assert status["status"] == api.STATUS_NOT_READY
        assert phases(racks, "solo") == {"solo-0": "Running"}  # the workload keeps running
    finally:
        faults.clear_compute_domain(node)
    status = wait_for(
        lambda: ready_status(racks, NAMESPACE, "solo"), what=f"{node} back, the domain Ready", timeout=60
    )
    assert [(n["name"], n["index"], n["status"]) for n in status["nodes"]] == [(node, 0, "Ready")]
    delete_job(racks, "solo")


def test_a_domain_larger_than_a_rack_stays_not_ready(racks: Cluster) -> None:
    same_clique = {
        "nodeSelector": {"type": "kwok"},  # the racks' nodes (fakeplugin.fleet.nodeobjects.simulated_node)
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"job": "wide"}},
                        "topologyKey": api.GPU_CLIQUE_LABEL,
                    }
                ]
            }
        },
    }
    objects = job("wide", 20, **same_clique)
    for worker in (o for o in objects if o["kind"] == "Pod"):
        worker["metadata"]["labels"] = {"job": "wide"}
    start_domain_job(racks, NAMESPACE, objects)
    counts = wait_for(
        lambda: (c := sorted(phases(racks, "wide").values())).count("Running") == TRAYS and c,
        what=f"{TRAYS} pods of the 20-node job Running",
        timeout=300,
    )
    assert counts.count("Pending") == 2

    def listed() -> dict[str, Any] | None:
        # Every rack node's daemon Ready (each reports on its own): the domain must still be NotReady.
        s = cd_status(racks, NAMESPACE, "wide")
        nodes = s.get("nodes") or []
        return s if len(nodes) == TRAYS and {n["status"] for n in nodes} == {"Ready"} else None

    status = wait_for(
        listed, what=f"{TRAYS} Ready nodes in the status (the controller sums every 2 s)", timeout=60
    )
    assert status["status"] == api.STATUS_NOT_READY
    assert len(status["nodes"]) == TRAYS and {n["status"] for n in status["nodes"]} == {"Ready"}
    assert len({n["cliqueID"] for n in status["nodes"]}) == 1
    delete_job(racks, "wide")
