"""Real Karpenter (its kwok provider, built from sigs.k8s.io/karpenter with hack/karpenter/main.go) adding
and removing fakeplugin GPU nodes for claim pods: `cluster up --with karpenter` on
examples/karpenter/inventory.yaml, a cluster that starts with no node at all.

Checked, each through the real scheduler, Karpenter's DRA simulation and the fleet: a pending pod's claim
gets a node of the cheapest instance type whose templates satisfy it (one T4, eight H100, a MIG 1g.5gb);
the node stays uninitialized until the fleet has published its pool; the pods run with their CDI specs
prepared; a claim no type can satisfy stays Pending with Karpenter's reason; a wave of 50 mixed pods gets
no empty and no needless node; two half-used 8-GPU nodes are consolidated into one; nodes deleted while
their pods are prepared leak nothing; idle nodes go with their slices and files.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import Cluster
from fakeplugin.fleet.reconcile import RECONCILE_SECONDS
from fakeplugin.inventory import INSTANCE_TYPE_LABEL
from tests.harness import DRIVER
from tests.harness.host import own_cluster, require_karpenter
from tests.harness.kube import apply, items, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "karpenter"
NAMESPACE = "jobs"
NODECLAIMS = "nodeclaims.karpenter.sh"
CONSOLIDATE_AFTER = 10.0  # examples/karpenter/nodepool.yaml
# Measured on 2 cores (docs/karpenter.md): an idle node went 20-35 s after consolidateAfter began; the
# bound leaves room for a loaded CI machine.
SCALE_DOWN_BOUND = 120.0
TIMEOUT = 240.0
NOMINATION_WINDOW = 21.0  # Karpenter's, with its default BATCH_MAX_DURATION of 10 s, and a second more


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    request = require_karpenter()
    inventory = yaml.safe_load((EXAMPLES / "inventory.yaml").read_text())
    with own_cluster(tmp_path_factory, "karpenter", inventory, NAMESPACE, karpenter=request) as c:
        templates = [d for d in docs("claims.yaml") if d["kind"] == "ResourceClaimTemplate"]
        apply(c, NAMESPACE, *templates, four_h100_template(), absent_product_template())
        yield c


@pytest.fixture
def scaled_to_zero(cluster: Cluster) -> Iterator[None]:
    """Every test starts and ends with no node: what it made is deleted, then its NodeClaims (Karpenter
    terminates their nodes at once; consolidation is the first test's subject)."""
    yield
    cluster.kubectl("delete", "deployments,pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    cluster.kubectl("delete", NODECLAIMS, "--all", "--wait=true", "--timeout=120s")
    wait_for(lambda: not nodes(cluster), what="every node removed")


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def template(name: str, cel: str, count: int = 1) -> dict[str, Any]:
    request = {
        "deviceClassName": "gpu.nvidia.com",
        "count": count,
        "selectors": [{"cel": {"expression": cel}}],
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}}},
    }


def four_h100_template() -> dict[str, Any]:
    return template(
        "four-h100", 'device.attributes["gpu.nvidia.com"].productName.startsWith("NVIDIA H100")', 4
    )


def absent_product_template() -> dict[str, Any]:
    return template("one-b200", 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA B200"')


def claim_pod(name: str, template_name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [
                {"name": "ctr", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template_name}],
        },
    }


def deployment(name: str, template_name: str, replicas: int) -> dict[str, Any]:
    pod = claim_pod(name, template_name, {"app": name})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": pod["metadata"], "spec": pod["spec"]},
        },
    }


def nodes(cluster: Cluster) -> list[dict[str, Any]]:
    return items(cluster, "nodes")


def nodeclaims(cluster: Cluster) -> list[dict[str, Any]]:
    return items(cluster, NODECLAIMS)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in items(cluster, "pods", "-n", NAMESPACE) if not p["metadata"].get("deletionTimestamp")]


def running(cluster: Cluster, count: int) -> list[dict[str, Any]] | None:
    found = [p for p in pods(cluster) if p["status"].get("phase") == "Running"]
    return found if len(found) == count else None


def slices_by_node(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    by_node: dict[str, list[dict[str, Any]]] = {}
    for s in items(cluster, "resourceslices"):
        if s["spec"]["driver"] == DRIVER:
            by_node.setdefault(s["spec"].get("nodeName", ""), []).append(s)
    return by_node


def fleet_node_dirs(cluster: Cluster) -> set[str]:
    root = cluster.layout.root / "nodes"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def allocated_devices(cluster: Cluster) -> dict[str, int]:
    """Node → devices of gpu.nvidia.com allocated there to some claim."""
    used: Counter[str] = Counter()
    for claim in items(cluster, "resourceclaims", "-A"):
        for result in (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", []):
            if result["driver"] == DRIVER:
                used[result["pool"]] += 1
    return dict(used)


def consolidation_view(cluster: Cluster) -> list[tuple[str, str, str, str]]:
    """Per NodeClaim: its last pod event, and its Consolidatable condition's status and transition time."""
    return [
        (
            c["metadata"]["name"],
            c["status"].get("lastPodEventTime", ""),
            condition(c, "Consolidatable").get("status", ""),
            condition(c, "Consolidatable").get("lastTransitionTime", ""),
        )
        for c in nodeclaims(cluster)
    ]


def settled_consolidatable(cluster: Cluster, count: int) -> list[tuple[str, str, str, str]] | None:
    """The `count` NodeClaims, each Consolidatable since its last pod event (nodeclaim/disruption/
    consolidation.go sets it consolidateAfter after that event, and clears it at the next)."""
    view = consolidation_view(cluster)
    settled = [v for v in view if v[2] == "True" and v[3] >= v[1]]
    return view if len(view) == count == len(settled) else None


def nudge(cluster: Cluster, consolidate_after: str) -> None:
    """A change of the NodePool's spec: Karpenter considers consolidation again."""
    patch = {"spec": {"disruption": {"consolidateAfter": consolidate_after}}}
    cluster.kubectl("patch", "nodepool", "gpu", "--type=merge", "-p", json.dumps(patch))


def assert_nothing_left_of(cluster: Cluster, gone: set[str]) -> None:
    """No slice, no allocated device, and (after the fleet's reconcile) no files of the nodes `gone`."""
    assert not gone & set(slices_by_node(cluster)), "slices of deleted nodes remain"
    assert not gone & set(allocated_devices(cluster)), "devices of deleted nodes stay allocated"
    wait_for(
        lambda: not gone & fleet_node_dirs(cluster),
        what="the fleet removing the deleted nodes' checkpoints, CDI specs and records",
        timeout=RECONCILE_SECONDS + 60,
    )


def test_claims_get_nodes_of_their_shape_only_once_published_and_idle_nodes_go(
    cluster: Cluster, scaled_to_zero: None
) -> None:
    assert nodes(cluster) == []  # the cluster starts with no node
    cluster.kill_fleet()  # nothing publishes: Karpenter must hold the nodes back
    try:
        shapes = {"t4-job": "gpu-t4-1x", "h100-job": "gpu-h100-8x", "mig-job": "gpu-a100-mig-8x"}
        apply(cluster, NAMESPACE, *[d for d in docs("claims.yaml") if d["kind"] == "Pod"])
        apply(cluster, NAMESPACE, claim_pod("b200-job", "one-b200"))

        def held() -> list[dict[str, Any]] | None:
            """Three registered NodeClaims (their nodes exist, Ready) whose initialization waits for DRA."""
            found = nodeclaims(cluster)
            waiting = [
                n
                for n in found
                if condition(n, "Registered").get("status") == "True"
                and condition(n, "Initialized").get("reason") == "DRADriverPoolsNotPublished"
            ]
            return found if len(found) == 3 and len(waiting) == 3 else None

        for claim in wait_for(held, what="three NodeClaims waiting for their DRA pools", timeout=TIMEOUT):
            assert condition(claim, "Initialized")["status"] != "True"
            assert DRIVER in claim["metadata"]["annotations"]["karpenter.sh/requested-dra-drivers"]
        time.sleep(5)  # and they stay so while nothing publishes
        assert held() and all(p["status"]["phase"] == "Pending" for p in pods(cluster))
        assert {p["metadata"]["name"] for p in pods(cluster)} == {*shapes, "b200-job"}
    finally:
        cluster.start_fleet()
    ran = wait_for(lambda: running(cluster, 3), what="the three claim pods Running", timeout=TIMEOUT)
    types = {n["metadata"]["name"]: n["metadata"]["labels"][INSTANCE_TYPE_LABEL] for n in nodes(cluster)}
    assert {p["metadata"]["name"]: types[p["spec"]["nodeName"]] for p in ran} == shapes
    published = slices_by_node(cluster)
    for claim in nodeclaims(cluster):
        node = claim["status"]["nodeName"]
        (pool,) = published[node]  # one slice: the whole pool
        assert pool["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
        owner = pool["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Node", node)
        # RFC 3339 to the second: the pool existed when Karpenter called the node initialized.
        assert condition(claim, "Initialized")["lastTransitionTime"] >= pool["metadata"]["creationTimestamp"]
    for pod in ran:
        name = pod["metadata"]["name"]
        record = cluster.container_record(NAMESPACE, name, "ctr")
        assert record["cdiDevices"] and all(
            d.startswith(f"k8s.{DRIVER}/claim=") for d in record["cdiDevices"]
        )
    listed = cluster.run_in_container_view(NAMESPACE, "h100-job", "ctr", "/usr/bin/nvidia-smi", "-L")
    assert listed.returncode == 0 and listed.stdout.count("NVIDIA H100 80GB HBM3") == 8, listed.stdout
    mig = cluster.run_in_container_view(NAMESPACE, "mig-job", "ctr", "/usr/bin/nvidia-smi", "-L")
    assert "MIG 1g.5gb" in mig.stdout, mig.stdout

    # A claim no instance type can satisfy: Pending with Karpenter's reason, no node for it.
    events = items(cluster, "events", "-n", NAMESPACE, "--field-selector", "involvedObject.name=b200-job")
    said = [e["message"] for e in events if e.get("source", {}).get("component") == "karpenter"]
    assert any("no instance type can satisfy the allocation" in m for m in said), said
    assert len(nodeclaims(cluster)) == 3

    # Idle: every node goes, with its slices, its allocated devices and (the fleet's reconcile) its files.
    made = set(types)
    assert made <= fleet_node_dirs(cluster)
    cluster.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    t0 = time.monotonic()
    wait_for(
        lambda: not nodes(cluster),
        what="the idle nodes removed",
        timeout=CONSOLIDATE_AFTER + SCALE_DOWN_BOUND,
    )
    print(f"idle nodes removed {time.monotonic() - t0:.0f} s after their pods")
    assert items(cluster, "resourceclaims", "-n", NAMESPACE) == []
    assert_nothing_left_of(cluster, made)


def test_a_wave_of_mixed_claim_pods_gets_no_empty_and_no_needless_node(
    cluster: Cluster, scaled_to_zero: None
) -> None:
    wave = {"t4": ("one-t4", 30, 1), "mig": ("one-mig-1g5gb", 10, 1), "h100": ("eight-h100", 10, 8)}
    t0 = time.monotonic()
    apply(cluster, NAMESPACE, *[deployment(name, t, n) for name, (t, n, _) in wave.items()])
    wait_for(lambda: running(cluster, 50), what="50 claim pods Running", timeout=2 * TIMEOUT, interval=2.0)
    print(f"50 pods Running {time.monotonic() - t0:.0f} s after creation, on {len(nodes(cluster))} nodes")
    claims = nodeclaims(cluster)
    assert all(condition(c, "Initialized").get("status") == "True" for c in claims)
    capacity = {
        node: sum(len(s["spec"].get("devices", [])) for s in pool)
        for node, pool in slices_by_node(cluster).items()
    }
    used = allocated_devices(cluster)
    assert set(capacity) == {c["status"]["nodeName"] for c in claims}
    assert all(used.get(node) for node in capacity), f"a node no pod uses: {capacity} {used}"
    # No needless node: per instance type, the devices left free add up to less than one node of it.
    types = {n["metadata"]["name"]: n["metadata"]["labels"][INSTANCE_TYPE_LABEL] for n in nodes(cluster)}
    spare: Counter[str] = Counter()
    for node, devices in capacity.items():
        spare[types[node]] += devices - used[node]
    per_node = {types[node]: devices for node, devices in capacity.items()}
    assert all(spare[t] < per_node[t] for t in spare), (spare, Counter(types.values()))
    assert Counter(types.values())["gpu-h100-8x"] == 10 and Counter(types.values())["gpu-a100-mig-8x"] == 1
    print(f"the wave's nodes: {dict(Counter(types.values()))}, free devices: {dict(spare)}")


def test_two_half_used_eight_gpu_nodes_are_consolidated_into_one(
    cluster: Cluster, scaled_to_zero: None
) -> None:
    apply(cluster, NAMESPACE, deployment("a1", "four-h100", 1), deployment("a2", "four-h100", 1))
    wait_for(lambda: running(cluster, 2), what="a1 and a2 Running", timeout=TIMEOUT)
    apply(cluster, NAMESPACE, deployment("b1", "four-h100", 1), deployment("b2", "four-h100", 1))
    four = wait_for(lambda: running(cluster, 4), what="b1 and b2 Running", timeout=TIMEOUT)
    on = {p["metadata"]["labels"]["app"]: p["spec"]["nodeName"] for p in four}
    assert on["a1"] == on["a2"] != on["b1"] == on["b2"]  # two full nodes, each from one batch
    # Karpenter does not disrupt a node nominated for pods in the last 20 s (statenode.go nominationWindow:
    # twice BATCH_MAX_DURATION), and a pass that finds nothing stands until the next change it watches.
    time.sleep(NOMINATION_WINDOW)
    deleted = time.monotonic()
    cluster.kubectl("delete", "deployment", "a2", "b1", "-n", NAMESPACE, "--wait=true")
    half = {on["a1"]: 4, on["b1"]: 4}
    wait_for(
        lambda: allocated_devices(cluster) == half, what="the deleted pods' claims gone: each node half used"
    )
    # The deletion is a pod event on each node only if Karpenter's podevents controller still finds the pod
    # in its cache (controller-runtime's reconcile.AsReconciler ignores NotFound): the fleet unprepares and
    # kwok deletes it within a second or two, so the event may be missed. Either way the pod events have
    # settled a consolidateAfter and some seconds after the deletion; then each node is Consolidatable
    # since its last event.
    time.sleep(max(0.0, deleted + CONSOLIDATE_AFTER + 5 - time.monotonic()))
    wait_for(
        lambda: settled_consolidatable(cluster, 2),
        what="both NodeClaims Consolidatable since their last pod event",
        timeout=60,
    )
    # Karpenter re-evaluates consolidation on pod, node and NodePool changes, not on ResourceClaim ones nor
    # on a NodeClaim turning Consolidatable (docs/karpenter.md): a pass that ran while the deleted pods'
    # claims still held their devices, or while a node was not Consolidatable, stands for up to 5 minutes.
    # A NodePool change is one it watches (its generation). A shorter consolidateAfter keeps both
    # Consolidatable; a longer one would clear them for a moment, and a pass then would stand again.
    nudge(cluster, "5s")
    # Each node is half used; Karpenter's simulation frees one node's devices and allocates its pod's
    # claim on the other's published slices, then evicts that pod: its replacement runs there.
    try:
        wait_for(
            lambda: len(nodes(cluster)) == 1,
            what="one node left",
            timeout=CONSOLIDATE_AFTER + SCALE_DOWN_BOUND,
        )
    except AssertionError as e:
        raise AssertionError(
            f"{e}; NodeClaims (lastPodEventTime, Consolidatable): {consolidation_view(cluster)}"
        ) from None
    nudge(cluster, "10s")
    both = wait_for(lambda: running(cluster, 2), what="a1 and b2 Running", timeout=TIMEOUT)
    (node,) = {p["spec"]["nodeName"] for p in both}
    assert node in (on["a1"], on["b1"]) and allocated_devices(cluster) == {node: 8}
    assert_nothing_left_of(cluster, {on["a1"], on["b1"]} - {node})


def test_nodes_deleted_while_their_pods_are_prepared_leak_nothing(
    cluster: Cluster, scaled_to_zero: None
) -> None:
    slow = template("slow-t4", 'device.attributes["gpu.nvidia.com"].productName == "Tesla T4"')
    slow["spec"]["metadata"] = {"annotations": {"fakeplugin.dev/prepare-delay": "8s"}}  # docs/faults.md
    apply(cluster, NAMESPACE, slow, deployment("t4", "slow-t4", 8))

    def preparing() -> str | None:
        """A registered node with a pod bound to it whose claim the fleet is still preparing."""
        registered = {
            c["status"]["nodeName"]
            for c in nodeclaims(cluster)
            if condition(c, "Registered").get("status") == "True"
        }
        bound = [p for p in pods(cluster) if p["spec"].get("nodeName") in registered]
        return next((p["spec"]["nodeName"] for p in bound if p["status"].get("phase") == "Pending"), None)

    gone = wait_for(preparing, what="a pod bound to a registered node, being prepared", timeout=TIMEOUT)
    cluster.kubectl("delete", "node", gone, "--wait=false")  # Karpenter drains it and deletes its NodeClaim
    ran = wait_for(lambda: running(cluster, 8), what="8 pods Running after the churn", timeout=2 * TIMEOUT)
    assert gone not in {p["spec"]["nodeName"] for p in ran}
    wait_for(lambda: gone not in {n["metadata"]["name"] for n in nodes(cluster)}, what=f"{gone} gone")
    assert_nothing_left_of(cluster, {gone})
    live = {p["spec"]["nodeName"] for p in ran}
    assert set(allocated_devices(cluster)) == live and sum(allocated_devices(cluster).values()) == 8


def test_a_nodepool_selecting_the_gpu_product_label_gets_that_gpus_type_fully_labelled(
    cluster: Cluster, scaled_to_zero: None
) -> None:
    """A NodePool written for a GPU Operator cluster, requiring GFD's `nvidia.com/gpu.product`: Karpenter
    launches the cheapest type whose offerings carry it (gpu-t4-1x, not the cheaper CPU-only cpu-8x,
    whose offerings say DoesNotExist), the node has the operator's labels from launch, and the fleet
    adds GFD's timestamp and keeps them (the annotation of the keys it gave). Expected values from GFD's
    rules by hand: a Tesla T4 is `Tesla-T4`, 15360 MiB, compute 7.5 (turing)."""
    pool = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "t4-product"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                    "requirements": [
                        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-T4"]}
                    ],
                    "expireAfter": "Never",
                }
            },
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-t4-pool"},
        "spec": {
            "nodeSelector": {"karpenter.sh/nodepool": "t4-product"},
            "containers": [{"name": "ctr", "image": "ubuntu:22.04"}],
        },
    }
    apply(cluster, None, pool)
    try:
        apply(cluster, NAMESPACE, pod)
        (ran,) = wait_for(
            lambda: running(cluster, 1), what="the pod Running on a t4-product node", timeout=TIMEOUT
        )
        node = next(n for n in nodes(cluster) if n["metadata"]["name"] == ran["spec"]["nodeName"])
        assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "gpu-t4-1x"

        def kept() -> dict[str, str] | None:
            meta = next(n for n in nodes(cluster) if n["metadata"]["name"] == ran["spec"]["nodeName"])[
                "metadata"
            ]
            owned = (meta.get("annotations") or {}).get("fakeplugin.dev/gpu-operator-labels")
            return meta["labels"] if owned else None

        labels = wait_for(kept, what="the fleet keeping the node's GPU Operator labels", timeout=TIMEOUT)
        assert {k: labels.get(f"nvidia.com/{k}") for k in ("gpu.product", "gpu.count", "gpu.memory")} == {
            "gpu.product": "Tesla-T4",
            "gpu.count": "1",
            "gpu.memory": "15360",
        }
        assert (labels["nvidia.com/gpu.family"], labels["nvidia.com/gpu.present"]) == ("turing", "true")
        assert labels["nvidia.com/gfd.timestamp"].isdigit()
    finally:
        cluster.kubectl("delete", "nodepool", "t4-product", "--wait=false")
