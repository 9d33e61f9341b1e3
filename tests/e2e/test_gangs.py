"""Gangs on simulated NVL72 racks, as Kubernetes 1.37 schedules them (docs/rack-scale-jobs.md): a Workload
and its PodGroup (scheduling.k8s.io/v1beta1) with `schedulingPolicy.gang.minCount` N and a topology
constraint on the clique label, N pods of 4 GPUs each (one ResourceClaimTemplate) joining the group by
`spec.schedulingGroup.podGroupName`, on the gates `cluster up` turns on by default there (GenericWorkload,
DRAWorkloadResourceClaims, TopologyAwareWorkloadScheduling; fakeplugin.cluster.versions).

The smallest fleet that shows it, examples/rack-scale/inventory.yaml: rack A, 3 GB200 trays in one clique,
and rack B, 2 trays in another (kwok plays the nodes, `fakeplugin fleet` their kubelet plugins and IMEX
daemons). Checked:
- a gang of 4 is one tray short in every clique (5 trays in all would take it, spread): no pod binds, no
  claim is allocated, the PodGroup says Unschedulable;
- the guide's gang of 3 with a ComputeDomain (examples/rack-scale/) binds whole on rack A, the
  only clique with room, and the domain forms over the gang's nodes alone;
- two gangs of 3 at once compete for rack A: one runs there, the other waits whole (rack B's 2 free trays
  untouched), and runs whole once the first is gone;
- failover: a gang of 2 run by an Indexed Job loses a GPU to XID 79; NVIDIA's NoSchedule taint, then a
  DeviceTaintRule with NoExecute evicts its pod, which ends Failed with DisruptionTarget, so the Job's
  podFailurePolicy fails the Job; the test, as the user's controller, re-creates the PodGroup and the Job and
  the gang runs whole on the other rack (its own one tray short), no GPU held twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import Cluster, versions
from fakeplugin.testing import container, device_request, pod, resource_claim_template
from tests.harness.domains import ready_status, start_domain_job
from tests.harness.gangs import XID_TAINT, gang_job, no_execute, worker
from tests.harness.host import own_cluster
from tests.harness.kube import apply, get, items, wait_for
from tests.harness.paths import EXAMPLES

pytestmark = pytest.mark.cluster

NAMESPACE = "gangs"
SCHEDULING_API = "scheduling.k8s.io/v1beta1"
CLIQUE_A = "0b6f3c1e-8a52-4d17-9e0c-3a4b5c6d7e8f.1"  # rack A's (the inventory's first entry)
# Each workload gate's stage in v1.37.2 (pkg/features/kube_features.go).
STAGES = {
    "GenericWorkload": "BETA",
    "DRAWorkloadResourceClaims": "BETA",
    "TopologyAwareWorkloadScheduling": "ALPHA",
}


INVENTORY = yaml.safe_load((EXAMPLES / "rack-scale" / "inventory.yaml").read_text())
# The guide's job: its ComputeDomain first, then the gang.
GUIDE_GANG = [
    d
    for f in ("compute-domain.yaml", "gang.yaml")
    for d in yaml.safe_load_all((EXAMPLES / "rack-scale" / f).read_text())
    if d
]


@pytest.fixture(scope="module")
def racks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    k8s = versions.release(versions.selected())
    if not k8s.feature_gates.get(versions.GENERIC_WORKLOAD) or k8s.workload_api != SCHEDULING_API:
        pytest.skip(
            f"the Workload API as {SCHEDULING_API} is on by default from Kubernetes 1.37; {k8s.minor} serves "
            f"{k8s.workload_api or 'none'} when asked for (docs/kubernetes-versions.md)"
        )
    with own_cluster(tmp_path_factory, "gangs", INVENTORY, NAMESPACE) as cluster:
        yield cluster


def gang(name: str, pods: int) -> list[dict[str, Any]]:
    """A Workload of one pod group, its PodGroup (gang of `pods`, all in one clique), the GPU claim template
    and the `pods` pods of 4 GPUs each: the guide's gang without its ComputeDomain, by builders."""
    objects = [*scheduling(name, pods), resource_claim_template(f"{name}-gpus", device_request(count=4))]
    return objects + [worker(f"{name}-{i}", name) for i in range(pods)]


def scheduling(name: str, pods: int) -> list[dict[str, Any]]:
    """Gang `name`'s Workload and PodGroup: `pods` pods or none, all in one clique."""
    policy = {"gang": {"minCount": pods}}
    constraints = {"topology": [{"key": api.GPU_CLIQUE_LABEL}]}
    workload = {
        "apiVersion": SCHEDULING_API,
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "podGroupTemplates": [
                {"name": "workers", "schedulingPolicy": policy, "schedulingConstraints": constraints}
            ]
        },
    }
    group = {
        "apiVersion": SCHEDULING_API,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "workloadRef": {"workloadName": name, "templateName": "workers"},
            "schedulingPolicy": policy,
            "schedulingConstraints": constraints,
        },
    }
    return [workload, group]


def members(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in items(cluster, "pods", "-n", NAMESPACE)
        if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == name
    ]


def bound_nodes(cluster: Cluster, name: str) -> list[str]:
    return [n for p in members(cluster, name) if (n := p["spec"].get("nodeName"))]


def gpu_claims(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The claims the control plane made from gang `name`'s GPU template, one per pod."""
    return [
        c
        for c in items(cluster, "resourceclaims", "-n", NAMESPACE)
        if c["metadata"].get("annotations", {}).get("resource.kubernetes.io/pod-claim-name") == "gpus"
        and c["metadata"]["ownerReferences"][0]["name"].startswith(f"{name}-")
    ]


def scheduled(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The PodGroup's PodGroupInitiallyScheduled condition, once the scheduler wrote one."""
    conditions = get(cluster, "podgroup", name, "-n", NAMESPACE).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "PodGroupInitiallyScheduled"), None)


def cliques(cluster: Cluster, nodes: list[str]) -> set[str]:
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in items(cluster, "nodes")}
    return {labels[n][api.GPU_CLIQUE_LABEL] for n in nodes}


def wait_running(cluster: Cluster, name: str, pods: int) -> list[str]:
    """Every pod of gang `name` Running; their nodes."""
    wait_for(
        lambda: [p["status"].get("phase") for p in members(cluster, name)] == ["Running"] * pods,
        what=f"every pod of gang {name} Running",
        timeout=180,
    )
    return bound_nodes(cluster, name)


def assert_waits_whole(cluster: Cluster, name: str, pods: int) -> None:
    """The scheduler tried gang `name` and placed none of it: no pod bound, no GPU held."""
    condition = wait_for(
        lambda: (c := scheduled(cluster, name)) and c["status"] == "False" and c,
        what=f"gang {name} found unschedulable",
        timeout=120,
    )
    assert condition["reason"] == "Unschedulable"
    claims = wait_for(
        lambda: len(c := gpu_claims(cluster, name)) == pods and c,
        what=f"the {pods} GPU claims of gang {name}",
        timeout=60,
    )
    assert [c.get("status", {}).get("allocation") for c in claims] == [None] * pods
    assert bound_nodes(cluster, name) == []


def delete_gang(cluster: Cluster, name: str) -> None:
    pods = [p["metadata"]["name"] for p in members(cluster, name)]
    cluster.kubectl("delete", "pod", *pods, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    cluster.kubectl("delete", "podgroup,workload", name, "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    cluster.kubectl("delete", "computedomain", name, "-n", NAMESPACE, "--ignore-not-found", "--wait=true")


def test_the_cluster_serves_the_workload_api_with_its_gates_by_default(racks: Cluster) -> None:
    resources = racks.kubectl("api-resources", f"--api-group={SCHEDULING_API.split('/')[0]}", "-o", "name")
    assert {"workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"} <= set(resources.stdout.split())
    versions_served = json.loads(racks.kubectl("get", "--raw", "/apis/scheduling.k8s.io").stdout)["versions"]
    assert {"groupVersion": SCHEDULING_API, "version": "v1beta1"} in versions_served
    # The API server's kubernetes_feature_enabled gauge: 1 for each gate on.
    metrics = racks.kubectl("get", "--raw", "/metrics").stdout.splitlines()
    for gate in versions.WORKLOAD_GATES:
        assert f'kubernetes_feature_enabled{{name="{gate}",stage="{STAGES[gate]}"}} 1' in metrics


def test_a_gang_one_tray_short_of_a_clique_binds_nothing_and_holds_no_gpu(racks: Cluster) -> None:
    apply(racks, NAMESPACE, *gang("big", 4))
    assert_waits_whole(racks, "big", 4)
    delete_gang(racks, "big")


def test_the_guides_gang_binds_whole_in_the_one_clique_with_room_and_its_domain_forms_over_its_nodes(
    racks: Cluster,
) -> None:
    """The guide's gang, `train` (examples/rack-scale/compute-domain.yaml and gang.yaml)."""
    start_domain_job(racks, NAMESPACE, GUIDE_GANG)
    nodes = wait_running(racks, "train", 3)
    assert sorted(nodes) == [f"rack-a-{i}" for i in range(3)]
    assert cliques(racks, nodes) == {CLIQUE_A}
    condition = scheduled(racks, "train") or {}
    assert (condition.get("status"), condition.get("reason")) == ("True", "Scheduled")
    pools = {
        r["pool"] for c in gpu_claims(racks, "train") for r in c["status"]["allocation"]["devices"]["results"]
    }
    assert pools == set(nodes)
    status = wait_for(
        lambda: ready_status(racks, NAMESPACE, "train"), what="the gang's domain Ready", timeout=60
    )
    assert sorted(n["name"] for n in status["nodes"]) == sorted(nodes)
    assert {n["cliqueID"] for n in status["nodes"]} == {CLIQUE_A}
    delete_gang(racks, "train")


def test_two_gangs_for_one_rack_one_runs_the_other_waits_whole_then_runs(racks: Cluster) -> None:
    apply(racks, NAMESPACE, *gang("first", 3), *gang("second", 3))
    wait_for(
        lambda: all(scheduled(racks, g) for g in ("first", "second")),
        what="the scheduler's verdict on both gangs",
        timeout=120,
    )
    winner = next(g for g in ("first", "second") if scheduled(racks, g)["status"] == "True")  # type: ignore[index]
    loser = "second" if winner == "first" else "first"
    assert cliques(racks, wait_running(racks, winner, 3)) == {CLIQUE_A}
    assert_waits_whole(racks, loser, 3)
    delete_gang(racks, winner)
    assert cliques(racks, wait_running(racks, loser, 3)) == {CLIQUE_A}
    delete_gang(racks, loser)


def allocated(cluster: Cluster) -> list[tuple[str, str]]:
    """(pool, device) of every device allocated to a claim of the namespace."""
    return [
        (r["pool"], r["device"])
        for c in items(cluster, "resourceclaims", "-n", NAMESPACE)
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    ]


def job_ended(cluster: Cluster, name: str) -> dict[str, Any] | None:
    conditions = get(cluster, "job", name, "-n", NAMESPACE).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Failed" and c["status"] == "True"), None)


def test_a_gang_losing_a_gpu_is_evicted_failed_by_its_job_and_re_placed_whole_on_the_other_rack(
    racks: Cluster,
) -> None:
    """Failover (docs/rack-scale-jobs.md, *A tray fails*). A filler pod holds rack A's third tray, so each
    rack has 2 free trays and the gang's own rack is one short once a GPU of it fails."""
    filler = pod(
        "filler",
        [container("worker", claims=["gpus"])],
        claims={"gpus": {"resourceClaimTemplateName": "filler-gpus"}},
        nodeSelector={"kubernetes.io/hostname": "rack-a-2"},
    )
    apply(racks, NAMESPACE, resource_claim_template("filler-gpus", device_request(count=4)), filler)
    wait_for(
        lambda: get(racks, "pod", "filler", "-n", NAMESPACE)["status"].get("phase") == "Running",
        what="the filler pod Running",
        timeout=60,
    )
    apply(
        racks, NAMESPACE, *scheduling("job", 2), resource_claim_template("job-gpus", device_request(count=4))
    )
    apply(racks, NAMESPACE, gang_job("job", 2))
    first = wait_running(racks, "job", 2)
    (clique,) = cliques(racks, first)
    victim = next(p for p in members(racks, "job") if p["spec"]["nodeName"] == first[0])
    claim = next(
        c
        for c in gpu_claims(racks, "job")
        if c["metadata"]["ownerReferences"][0]["uid"] == victim["metadata"]["uid"]
    )
    gpu = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    node, victim_name = first[0], victim["metadata"]["name"]

    timeline: dict[str, float] = {}
    start = time.monotonic()
    racks.kubectl("annotate", "node", node, f"fakeplugin.dev/device-faults={gpu}=xid:79")
    xid79 = {"key": XID_TAINT, "value": "79", "effect": "NoSchedule"}

    def taints() -> list[dict[str, Any]]:
        slices = items(racks, "resourceslices", "--field-selector", f"spec.nodeName={node}")
        return [
            t
            for s in slices
            for d in s["spec"].get("devices") or []
            if d["name"] == gpu
            for t in d.get("taints") or []
        ]

    wait_for(
        lambda: any({k: t.get(k) for k in xid79} == xid79 for t in taints()),
        what="NVIDIA's xid taint",
        timeout=30,
    )
    timeline["NVIDIA's NoSchedule taint on the slice"] = time.monotonic() - start
    # The remediation step (the cluster's, not NVIDIA's driver): the same taint as NoExecute, which the
    # device taint eviction controller acts on (resource.k8s.io/v1 DeviceTaintRule in 1.37).
    apply(racks, None, no_execute(node, gpu))
    timeline["DeviceTaintRule NoExecute created"] = time.monotonic() - start

    def evicted() -> bool:
        found = items(racks, "pods", "-n", NAMESPACE, "--field-selector", f"metadata.name={victim_name}")
        return not found or bool(found[0]["metadata"].get("deletionTimestamp"))

    wait_for(evicted, what="the pod on the failed GPU evicted", timeout=30)
    timeline["pod evicted (deleting)"] = time.monotonic() - start
    ended = wait_for(
        lambda: job_ended(racks, "job"), what="the Job failed by its podFailurePolicy", timeout=60
    )
    timeline["Job Failed (FailJob on DisruptionTarget)"] = time.monotonic() - start
    assert ended["reason"] == "PodFailurePolicy", ended
    assert "DisruptionTarget" in ended["message"] and victim_name in ended["message"], ended
    wait_for(lambda: not members(racks, "job"), what="the failed gang's pods gone", timeout=60)
    timeline["old gang's pods gone"] = time.monotonic() - start

    # The user's (here the test's) controller step: Kubernetes does not restart a failed Job; re-create
    # the PodGroup (its scheduling is done once) and the Job.
    racks.kubectl("delete", "job,podgroup", "job", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    apply(racks, NAMESPACE, *scheduling("job", 2)[1:], gang_job("job", 2))
    timeline["Job and PodGroup re-created"] = time.monotonic() - start
    wait_for(lambda: len(bound_nodes(racks, "job")) == 2, what="the new gang bound", timeout=60)
    timeline["new gang bound"] = time.monotonic() - start
    second = wait_running(racks, "job", 2)
    timeline["new gang Running"] = time.monotonic() - start
    print("failover timeline (s after the fault):", json.dumps({k: round(v, 1) for k, v in timeline.items()}))

    (new_clique,) = cliques(racks, second)
    assert new_clique != clique and node not in second
    held = allocated(racks)
    assert len(held) == len(set(held)) == 12  # the filler's 4 and the gang's 8, none twice
    assert (node, gpu) not in held

    racks.kubectl("delete", "job,podgroup,workload", "job", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    racks.kubectl("delete", "pod", "filler", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    racks.kubectl("delete", "devicetaintrule", "job-xid")
    racks.kubectl("annotate", "node", node, "fakeplugin.dev/device-faults-")
