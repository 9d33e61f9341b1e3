"""`kill -9` of the fleet, the world changing while it is down, and a restart: the fleet reconciles as a
kubelet does (fleet.reconcile, docs/local-cluster.md "What the fleet does on restart, as a kubelet").

One cluster of five simulated nodes (no kubelet): four of two H100s (`main`) and one of one (`doomed`).
The fleet process is killed by its pid at a seeded random moment of a prepare wave, then of a
scale-down; while it is down pods are force-deleted, new pods are bound, a claim is deleted under its
running pod, a node is deleted. After each restart: every pod that should run is Running, and no
checkpoint entry, CDI spec or container record is left of a claim or pod that is gone, nor any file of
the deleted node; a last wave takes every device of the main nodes, so a device still held by a claim
that is gone would keep one pod Pending ("already allocated to different claim").

FAKEPLUGIN_TEST_SEED picks the kill moments and victims (default 20).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.cluster import Cluster
from fakeplugin.testing import claim_pod, container, pod, resource_claim, resource_claim_template
from tests.harness import DRIVER
from tests.harness.host import own_cluster
from tests.harness.kube import apply, get, items, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "restart"
SEED = int(os.environ.get("FAKEPLUGIN_TEST_SEED", "20"))
MAIN_GPUS = 8  # four nodes of two
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "namePrefix": "main-",
            "replicas": 4,
            "kubelet": False,
            "labels": {"pool": "main"},
            "gpus": [{"profile": "h100-80gb-hbm3", "count": 2}],
        },
        {
            "name": "doomed",
            "kubelet": False,
            "labels": {"pool": "doomed"},
            "gpus": [{"profile": "h100-80gb-hbm3"}],
        },
    ],
}
SPEC_PREFIX = "k8s.gpu.nvidia.com-claim_"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(tmp_path_factory, "fleet-restart", INVENTORY, NAMESPACE) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def rng() -> random.Random:
    print(f"FAKEPLUGIN_TEST_SEED={SEED}")
    return random.Random(SEED)


def kubectl(cluster: Cluster, *args: str) -> None:
    cluster.kubectl(*args, "-n", NAMESPACE)


def on_pool(obj: dict[str, Any], pool: str) -> dict[str, Any]:
    obj["spec"]["nodeSelector"] = {"pool": pool}
    return obj


def deployment(replicas: int) -> dict[str, Any]:
    template = on_pool(
        pod("work", [container()], claims={"gpu": {"resourceClaimTemplateName": "one-gpu"}}), "main"
    )
    template["spec"]["restartPolicy"] = "Always"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "work"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "work"}},
            "template": {"metadata": {"labels": {"app": "work"}}, "spec": template["spec"]},
        },
    }


def pods(cluster: Cluster) -> list[dict[str, Any]]:
    return items(cluster, "pods", "-n", NAMESPACE)


def work_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return [p for p in pods(cluster) if (p["metadata"].get("labels") or {}).get("app") == "work"]


def running(cluster: Cluster) -> int:
    return sum(p["status"].get("phase") == "Running" for p in work_pods(cluster))


def settled(cluster: Cluster, replicas: int) -> bool:
    """`replicas` pods of the Deployment, each Running, none deleting."""
    found = work_pods(cluster)
    return len(found) == replicas and all(
        p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp") for p in found
    )


def scale(cluster: Cluster, replicas: int) -> None:
    kubectl(cluster, "scale", "deployment", "work", f"--replicas={replicas}")


def force_delete(cluster: Cluster, *names: str) -> None:
    if names:
        kubectl(cluster, "delete", "pod", *names, "--force", "--grace-period=0")


def on_disk(cluster: Cluster) -> dict[str, dict[str, set[str]]]:
    """Per simulated node dir: the claim UIDs of its checkpoint and of its CDI specs, its records' pods."""
    found: dict[str, dict[str, set[str]]] = {}
    for node in sorted((cluster.layout.root / "nodes").iterdir()):
        if not (node / "plugins").is_dir():
            continue  # not the fleet's
        checkpoint = node / "plugins" / DRIVER / "checkpoint.json"
        entries = json.loads(checkpoint.read_text())["preparedClaims"] if checkpoint.exists() else {}
        specs = {
            p.name.removeprefix(SPEC_PREFIX).removesuffix(".yaml")
            for p in (node / "cdi").glob(f"{SPEC_PREFIX}*")
        }
        records = {p.name.split("_")[1] for p in (node / "containers").glob("*.json")}
        found[node.name] = {"checkpoint": set(entries), "cdi": specs, "records": records}
    return found


def expected(cluster: Cluster) -> dict[str, dict[str, set[str]]]:
    """What on_disk must show: per main node, the claims (that exist) of its live pods, and those pods."""
    claims = {
        c["metadata"]["name"]: c["metadata"]["uid"] for c in items(cluster, "resourceclaims", "-n", NAMESPACE)
    }
    want: dict[str, dict[str, set[str]]] = {
        n["metadata"]["name"]: {"checkpoint": set(), "cdi": set(), "records": set()}
        for n in items(cluster, "nodes")
        if (n["metadata"].get("labels") or {}).get("pool") == "main"
    }
    for p in pods(cluster):
        if p["metadata"].get("deletionTimestamp"):
            return {}  # still going: not settled
        node = want.setdefault(p["spec"]["nodeName"], {"checkpoint": set(), "cdi": set(), "records": set()})
        node["records"].add(p["metadata"]["name"])
        for status in p["status"].get("resourceClaimStatuses") or []:
            node["checkpoint"].add(claims[status["resourceClaimName"]])
        for entry in p["spec"].get("resourceClaims") or []:
            if entry.get("resourceClaimName") in claims:
                node["checkpoint"].add(claims[entry["resourceClaimName"]])
    for node in want.values():
        node["cdi"] = set(node["checkpoint"])
    return want


def assert_clean(cluster: Cluster, timeout: float = 60.0) -> None:
    """Every file the fleet keeps is of a live pod or claim (the reconcile pass may still be running)."""

    def used(nodes: dict[str, dict[str, set[str]]]) -> dict[str, dict[str, set[str]]]:
        return {name: files for name, files in nodes.items() if any(files.values())}

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and used(on_disk(cluster)) != used(expected(cluster)):
        time.sleep(1.0)
    assert used(on_disk(cluster)) == used(expected(cluster))


def wait_settled(cluster: Cluster, replicas: int, what: str) -> None:
    wait_for(lambda: settled(cluster, replicas), what=what, timeout=120)


def test_a_kill_during_a_prepare_wave_then_pods_claims_and_a_node_gone_while_down(
    cluster: Cluster, rng: random.Random
) -> None:
    # Each prepare of the wave's claims waits a second (before its checkpoint entry): a kill lands mid-wave.
    slow = resource_claim_template("one-gpu", annotations={"fakeplugin.dev/prepare-delay": "1s"})
    apply(cluster, NAMESPACE, slow, resource_claim("lone"))
    apply(
        cluster,
        NAMESPACE,
        on_pool(claim_pod("lone-pod", {"resourceClaimName": "lone"}), "main"),
        on_pool(claim_pod("doomed-pod", {"resourceClaimTemplateName": "one-gpu"}), "doomed"),
    )
    for name in ("lone-pod", "doomed-pod"):
        wait_for(
            lambda n=name: get(cluster, "pod", n, "-n", NAMESPACE)["status"].get("phase") == "Running",
            what=f"{name} Running",
        )
    assert (cluster.layout.root / "nodes" / "doomed" / "plugins" / DRIVER / "checkpoint.json").exists()

    apply(cluster, NAMESPACE, deployment(5))
    wait_for(lambda: any(p["spec"].get("nodeName") for p in work_pods(cluster)), what="the wave bound")
    time.sleep(rng.uniform(0.0, 1.5))
    cluster.kill_fleet()
    print(f"killed with {running(cluster)} of 5 pods of the wave Running")

    # While it is down: two of the wave force-deleted (the Deployment replaces them), one more pod, the
    # lone claim deleted under its running pod, the doomed node deleted with its pod (as pod GC would).
    wait_for(lambda: len(work_pods(cluster)) == 5, what="the wave's pods")
    victims = rng.sample(sorted(p["metadata"]["name"] for p in work_pods(cluster)), 2)
    force_delete(cluster, *victims)
    scale(cluster, 6)
    kubectl(cluster, "delete", "resourceclaim", "lone", "--wait=false")
    kubectl(
        cluster, "patch", "resourceclaim", "lone", "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    cluster.kubectl("delete", "node", "doomed", "--wait=false")
    force_delete(cluster, "doomed-pod")
    wait_for(lambda: len(work_pods(cluster)) == 6, what="the Deployment's replacements")

    cluster.start_fleet()
    wait_settled(cluster, 6, "the wave Running after the restart")
    assert get(cluster, "pod", "lone-pod", "-n", NAMESPACE)["status"]["phase"] == "Running"
    assert_clean(cluster)
    assert not (cluster.layout.root / "nodes" / "doomed").exists()
    wait_for(
        lambda: not [s for s in items(cluster, "resourceslices") if s["spec"]["nodeName"] == "doomed"],
        what="the deleted node's slices gone (owned by its Node)",
    )


def test_a_kill_during_a_scale_down_then_terminating_pods_force_deleted(
    cluster: Cluster, rng: random.Random
) -> None:
    kubectl(cluster, "delete", "pod", "lone-pod", "--wait=false")
    scale(cluster, 1)
    time.sleep(rng.uniform(0.0, 0.5))
    cluster.kill_fleet()
    print(f"killed with {len(work_pods(cluster))} pods of the Deployment left")

    terminating = sorted(
        p["metadata"]["name"] for p in work_pods(cluster) if p["metadata"].get("deletionTimestamp")
    )
    force_delete(cluster, *rng.sample(terminating, min(2, len(terminating))))

    cluster.start_fleet()
    wait_settled(cluster, 1, "the scale-down done after the restart")
    wait_for(
        lambda: [p["metadata"]["name"] for p in pods(cluster)] == [work_pods(cluster)[0]["metadata"]["name"]],
        what="lone-pod gone",
    )
    assert_clean(cluster)


def test_a_wave_on_every_device_after_the_restarts_all_runs(cluster: Cluster) -> None:
    scale(cluster, MAIN_GPUS)
    wait_settled(cluster, MAIN_GPUS, f"{MAIN_GPUS} pods Running, one per device of the main nodes")
    assert_clean(cluster)
    placed = sorted(p["spec"]["nodeName"] for p in work_pods(cluster))
    assert placed == sorted(f"main-{i}" for i in range(4) for _ in range(2))
    scale(cluster, 0)
    wait_for(lambda: not pods(cluster), what="every pod gone")
    assert_clean(cluster)
