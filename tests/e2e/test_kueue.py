"""Real Kueue (built from its Go module, `cluster up --with kueue`) admitting GPU Jobs on our nodes: a real
kubelet node with two T10s and 52 simulated ones (50 H100 x 2, 2 H200 on DynamicMIG), the examples of
examples/kueue/ as the fixtures, Kueue's DRA quota with examples/kueue/mig-counters.yaml.

Checked, each way Kueue reads our slices: a claim's CEL selector against the devices (admitted within quota,
Inadmissible when no device matches), the extended resource of our DeviceClass, the `memory` counter our
DynamicMIG partitions consume; quota held while Jobs run and given back when one ends; a cohort on the
fleet borrowing and reclaiming; and KAI-Scheduler's contract that a patched extendedResourceName stays.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import Cluster
from fakeplugin.fleet.stages import COMPLETE_AFTER, PREPARED
from tests.harness.host import own_cluster, require_kueue
from tests.harness.kube import apply, get, items, wait_for
from tests.harness.kueue import (
    KUEUE,
    admitted,
    condition,
    create_job,
    docs,
    finished,
    refused,
    suspended,
    usage,
    workload,
)

pytestmark = pytest.mark.cluster

NAMESPACE = "team-a"
OTHER = "team-b"
T10_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"
ABSENT_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA B200'"
TIMEOUT = 180.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    request = require_kueue(str(KUEUE / "mig-counters.yaml"))
    inventory = yaml.safe_load((KUEUE / "inventory.yaml").read_text())
    with own_cluster(
        tmp_path_factory,
        "kueue",
        inventory,
        NAMESPACE,
        plugin_args=["--feature-gates=DynamicMIG=true"],
        kueue=request,
    ) as c:
        c.kubectl("create", "namespace", OTHER)
        yield c


def running_pods(
    cluster: Cluster, job: str, count: int, namespace: str = NAMESPACE
) -> list[dict[str, Any]] | None:
    pods = items(cluster, "pods", "-n", namespace, "-l", f"job-name={job}")
    running = [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return running if len(running) == count else None


def delete_jobs(cluster: Cluster, namespace: str, *jobs: str) -> None:
    cluster.kubectl(
        "delete", "job", *jobs, "-n", namespace, "--cascade=foreground", "--wait=true", "--timeout=120s"
    )


@pytest.fixture
def queues(cluster: Cluster) -> Iterator[None]:
    apply(cluster, NAMESPACE, *docs("queues.yaml"))
    yield
    cluster.kubectl(
        "delete", "jobs", "--all", "-n", NAMESPACE, "--cascade=foreground", "--wait=true", "--timeout=180s"
    )
    cluster.kubectl(
        "delete", "-n", NAMESPACE, "-f", str(KUEUE / "queues.yaml"), "--wait=true", "--timeout=60s"
    )


def test_jobs_within_quota_run_after_prepare_and_the_next_is_admitted_when_one_ends(
    cluster: Cluster, queues: None
) -> None:
    on_h100 = create_job(cluster, "job-h100.yaml", NAMESPACE)
    on_t10 = create_job(cluster, "job-h100.yaml", NAMESPACE, cel=T10_CEL)  # the real kubelet node's two T10s
    for job in (on_h100, on_t10):
        w = wait_for(
            lambda job=job: admitted(cluster, job, NAMESPACE), what=f"{job} admitted", timeout=TIMEOUT
        )
        assert usage(w) == {"nvidia.com/gpu": "2"}
    h100_pods = wait_for(
        lambda: running_pods(cluster, on_h100, 2), what=f"{on_h100} running", timeout=TIMEOUT
    )
    assert {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in h100_pods} == {"h100"}
    assert all(p["metadata"]["annotations"].get(PREPARED) == "true" for p in h100_pods)  # the fleet prepared
    t10_pods = wait_for(lambda: running_pods(cluster, on_t10, 2), what=f"{on_t10} running", timeout=TIMEOUT)
    assert {p["spec"]["nodeName"] for p in t10_pods} == {"t10-kubelet"}
    calls = cluster.calls("t10-kubelet", method="NodePrepareResources")
    prepared = {c.rsplit(":", 1)[0] for r in calls if r.get("result") == "ok" for c in r["claims"]}
    claims = {
        f"{NAMESPACE}/{s['resourceClaimName']}"
        for p in t10_pods
        for s in p["status"]["resourceClaimStatuses"]
    }
    assert len(claims) == 2 and claims <= prepared  # the kubelet had our plugin prepare them

    waiting = create_job(cluster, "job-h100.yaml", NAMESPACE)
    w = wait_for(
        lambda: refused(cluster, waiting, NAMESPACE),
        what=f"{waiting} pending",
        timeout=TIMEOUT,
    )
    assert "insufficient unused quota" in condition(w, "QuotaReserved")["message"]
    assert suspended(cluster, waiting, NAMESPACE)
    assert not items(cluster, "pods", "-n", NAMESPACE, "-l", f"job-name={waiting}")

    # The H100 Job's pods end (kwok's pod-complete stage): the Job completes, its quota is free again.
    cluster.kubectl("annotate", "pods", "-n", NAMESPACE, "-l", f"job-name={on_h100}", f"{COMPLETE_AFTER}=1s")
    wait_for(
        lambda: finished(cluster, on_h100, NAMESPACE),
        what="finished",
        timeout=TIMEOUT,
    )
    wait_for(lambda: admitted(cluster, waiting, NAMESPACE), what=f"{waiting} admitted", timeout=TIMEOUT)
    wait_for(lambda: running_pods(cluster, waiting, 2), what=f"{waiting} running", timeout=TIMEOUT)


def test_a_claim_no_device_matches_is_inadmissible(cluster: Cluster, queues: None) -> None:
    job = create_job(cluster, "job-h100.yaml", NAMESPACE, cel=ABSENT_CEL)
    w = wait_for(
        lambda: refused(cluster, job, NAMESPACE, "Inadmissible"), what=f"{job} inadmissible", timeout=TIMEOUT
    )
    reserved = condition(w, "QuotaReserved")
    assert (
        "insufficient matching devices for CEL selector in DeviceClass gpu.nvidia.com" in reserved["message"]
    )
    assert suspended(cluster, job, NAMESPACE) and admitted(cluster, job, NAMESPACE) is None


def test_the_extended_resource_of_our_device_class_is_charged_as_gpus(cluster: Cluster, queues: None) -> None:
    job = create_job(cluster, "job-extended-resource.yaml", NAMESPACE)
    w = wait_for(lambda: admitted(cluster, job, NAMESPACE), what=f"{job} admitted", timeout=TIMEOUT)
    assert usage(w) == {"nvidia.com/gpu": "1"}
    (pod,) = wait_for(lambda: running_pods(cluster, job, 1), what=f"{job} running", timeout=TIMEOUT)
    assert (
        pod["status"]["extendedResourceClaimStatus"]["requestMappings"][0]["resourceName"] == "nvidia.com/gpu"
    )


def test_mig_quota_is_charged_by_the_counters_the_partitions_consume(cluster: Cluster, queues: None) -> None:
    first = create_job(cluster, "job-mig.yaml", NAMESPACE)
    w = wait_for(lambda: admitted(cluster, first, NAMESPACE), what=f"{first} admitted", timeout=TIMEOUT)
    assert usage(w) == {"nvidia.com/mig-memory": "32Gi"}  # 2 x the 16Gi `memory` counter of a 1g.18gb
    pods = wait_for(lambda: running_pods(cluster, first, 2), what=f"{first} running", timeout=TIMEOUT)
    assert {p["spec"]["nodeName"].rsplit("-", 1)[0] for p in pods} == {"h200"}
    second = create_job(cluster, "job-mig.yaml", NAMESPACE, pods=1)
    w = wait_for(
        lambda: refused(cluster, second, NAMESPACE),
        what=f"{second} pending",
        timeout=TIMEOUT,
    )
    assert "insufficient unused quota for nvidia.com/mig-memory" in condition(w, "QuotaReserved")["message"]
    delete_jobs(cluster, NAMESPACE, first)
    w = wait_for(lambda: admitted(cluster, second, NAMESPACE), what=f"{second} admitted", timeout=TIMEOUT)
    assert usage(w) == {"nvidia.com/mig-memory": "16Gi"}


def test_a_cohort_on_the_fleet_borrows_and_reclaims(cluster: Cluster) -> None:
    apply(cluster, None, *docs("cohort.yaml"))
    try:
        # 4 of its own, 2 borrowed from team-b
        borrower = create_job(cluster, "job-h100.yaml", NAMESPACE, pods=6)
        w = wait_for(
            lambda: admitted(cluster, borrower, NAMESPACE), what=f"{borrower} admitted", timeout=TIMEOUT
        )
        assert usage(w) == {"nvidia.com/gpu": "6"}
        wait_for(lambda: running_pods(cluster, borrower, 6), what=f"{borrower} running", timeout=TIMEOUT)
        owner = create_job(cluster, "job-h100.yaml", OTHER, pods=4)
        wait_for(lambda: admitted(cluster, owner, OTHER), what=f"{owner} admitted", timeout=TIMEOUT)
        # team-b took its quota back: the borrower was evicted (suspended, its pods gone and unprepared).
        w = wait_for(
            lambda: (
                (w := workload(cluster, borrower, NAMESPACE))
                and condition(w, "Evicted").get("status") == "True"
                and w
            ),
            what=f"{borrower} evicted",
            timeout=TIMEOUT,
        )
        assert condition(w, "Evicted")["reason"] == "Preempted"
        wait_for(lambda: running_pods(cluster, owner, 4, OTHER), what=f"{owner} running", timeout=TIMEOUT)
        wait_for(
            lambda: suspended(cluster, borrower, NAMESPACE), what=f"{borrower} suspended", timeout=TIMEOUT
        )
    finally:
        for ns in (NAMESPACE, OTHER):
            cluster.kubectl(
                "delete", "jobs", "--all", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=180s"
            )
        cluster.kubectl("delete", "-f", str(KUEUE / "cohort.yaml"), "--wait=true", "--timeout=60s")


def test_a_patched_extended_resource_name_is_kept_across_plugin_restarts(cluster: Cluster) -> None:
    """KAI-Scheduler's e2e patches the DeviceClass's extendedResourceName and expects it to stay."""
    device_class = get(cluster, "deviceclass", "gpu.nvidia.com")
    assert device_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    slices = items(cluster, "resourceslices")
    assert {s["spec"]["driver"] for s in slices if s["spec"].get("nodeName") == "t10-kubelet"} == {
        "gpu.nvidia.com"
    }
    patch = {"spec": {"extendedResourceName": "example.com/gpu"}}
    cluster.kubectl("patch", "deviceclass", "gpu.nvidia.com", "--type=merge", "-p", json.dumps(patch))
    try:
        cluster.restart_plugin("t10-kubelet")
        assert (
            get(cluster, "deviceclass", "gpu.nvidia.com")["spec"]["extendedResourceName"] == "example.com/gpu"
        )
    finally:
        restore = {"spec": {"extendedResourceName": "nvidia.com/gpu"}}
        cluster.kubectl("patch", "deviceclass", "gpu.nvidia.com", "--type=merge", "-p", json.dumps(restore))
