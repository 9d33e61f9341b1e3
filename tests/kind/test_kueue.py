"""Kueue on kind with Kueue's own chart (`charts/kueue` of its Go module, as `hack/build-k8s.sh --only kueue`
copies it) and its manager in an image built here (hack/kind/tool-image.sh kueue: the binary built from the
module, on the local Debian base), beside our chart on the session's cluster (docs/kueue-kind.md).

The chart runs as on any cluster: Kueue's internal certificate management, its webhook Service, its
Configuration examples/kueue/config.yaml as `managerConfig.controllerManagerConfigYaml` (batch/job, and
NVIDIA's DeviceClasses mapped to `nvidia.com/gpu` and `nvidia.com/mig`). With examples/kueue/queues.yaml
(4 GPUs of quota) and examples/kueue/job-kind.yaml (3 pods, a claim template for the kind workers' T10s and
A5000): the Job webhook suspends queued Jobs; a Job within quota is admitted with `resourceUsage`
nvidia.com/gpu and its pods list, in real containers, each the GPU allocated for its claim; a second one,
over the unused quota, stays suspended and Pending ("insufficient unused quota") with no pods until the
first is deleted, then is admitted and gets the three GPUs. The module fixture uninstalls the release and
checks Kueue's CRDs and webhook configurations gone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.cluster.kueue import NAMESPACE as KUEUE_NAMESPACE
from fakeplugin.cluster.kueue import suspends_jobs
from tests.harness.host import require_kueue
from tests.harness.kind import CLUSTER as CLUSTER_NAME
from tests.harness.kind import KIND as KIND_BIN
from tests.harness.kind import KindCluster, allocated_uuids, smi_uuids
from tests.harness.kube import apply, wait_for
from tests.harness.kueue import (
    KUEUE,
    admitted,
    condition,
    create_job,
    docs,
    refused,
    suspended,
    usage,
)
from tests.harness.paths import REPO
from tests.harness.tooling import unavailable

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

RELEASE = "kueue"
API_GROUP = "kueue.x-k8s.io"
JOB = "job-kind.yaml"  # 3 pods, one lab GPU each, held until the Job is deleted
PODS = 3
TIMEOUT = 180.0


def leftovers(kind: KindCluster) -> list[str]:
    """Kueue's CRDs, APIServices and webhook configurations still in the cluster."""
    names = kind.kubectl(
        "get", "crd,apiservices,mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
    ).stdout.split()
    return [n for n in names if n.endswith(f".{API_GROUP}") or "/kueue-" in n]


@pytest.fixture(scope="module")
def kueue_chart(kind_cluster: KindCluster) -> Iterator[None]:
    """Kueue's chart installed with the local image; uninstalled after, its CRDs deleted."""
    kind = kind_cluster
    req = require_kueue()
    chart = req.module / "charts" / "kueue"
    if not (chart / "Chart.yaml").is_file():
        unavailable(f"no Kueue chart at {chart} (hack/build-k8s.sh --only kueue copies it)")
    out = kind.run(str(REPO / "hack/kind/tool-image.sh"), "kueue", req.version, timeout=600)
    image = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["KUEUE_IMAGE"]
    kind.run(str(KIND_BIN), "load", "docker-image", "--name", CLUSTER_NAME, image, timeout=600)
    repository, tag = image.rsplit(":", 1)
    try:
        kind.helm(
            "install",
            RELEASE,
            str(chart),
            "-n",
            KUEUE_NAMESPACE,
            "--create-namespace",
            "--set",
            f"controllerManager.manager.image.repository={repository}",
            "--set",
            f"controllerManager.manager.image.tag={tag}",
            "--set",
            "controllerManager.manager.image.pullPolicy=IfNotPresent",
            # Kueue's defaults are the chart's: the example's fields are all it needs to add.
            "--set-file",
            f"managerConfig.controllerManagerConfigYaml={req.source}",
            "--wait",
            "--timeout=5m",
        )
        # Ready is not enough: the webhook serves once Kueue's certificate rotation has written its Secret.
        wait_for(lambda: suspends_jobs(kind.kubectl), what="Kueue's Job webhook suspending Jobs", timeout=120)
        yield
    finally:
        kind.helm("uninstall", RELEASE, "-n", KUEUE_NAMESPACE, "--ignore-not-found", "--wait", "--timeout=5m")
        # The chart's CRDs are templates (helm deletes them); any other left is deleted here.
        for name in leftovers(kind):
            kind.kubectl("delete", name, "--ignore-not-found", "--wait", "--timeout=120s", timeout=130)
        kind.kubectl(
            "delete",
            "namespace",
            KUEUE_NAMESPACE,
            "--ignore-not-found",
            "--wait",
            "--timeout=180s",
            timeout=200,
        )
        assert leftovers(kind) == []


@pytest.fixture
def queues(kueue_chart: None, kind_cluster: KindCluster, kind_namespace: str) -> Iterator[str]:
    """examples/kueue/queues.yaml in the test's namespace; Jobs and queues deleted while Kueue runs (it
    holds finalizers on Workloads, ClusterQueues and ResourceFlavors)."""
    kind = kind_cluster
    apply(kind, kind_namespace, *docs("queues.yaml"))
    yield kind_namespace
    kind.kubectl(
        "delete",
        "jobs",
        "--all",
        "-n",
        kind_namespace,
        "--cascade=foreground",
        "--wait",
        "--timeout=180s",
        timeout=200,
    )
    kind.kubectl(
        "delete",
        "-n",
        kind_namespace,
        "-f",
        str(KUEUE / "queues.yaml"),
        "--wait",
        "--timeout=60s",
        timeout=70,
    )


def slice_gpus(kind: KindCluster) -> dict[str, str]:
    """GPU UUID -> its node, as our plugin published them."""
    return {
        d["attributes"]["uuid"]["string"]: s["spec"]["nodeName"]
        for s in kind.get("resourceslices")["items"]
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"].get("devices", [])
    }


def running(kind: KindCluster, namespace: str, job: str) -> list[dict[str, Any]] | None:
    """The Job's pods, once all PODS run."""
    pods = kind.get("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
    up = [
        p
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return up if len(up) == PODS else None


def gpus_listed(kind: KindCluster, namespace: str, job: str) -> dict[str, str]:
    """GPU UUID -> node, as the Job's running pods listed them (their containers' own `nvidia-smi -L`), each
    pod's one GPU checked to be the device allocated for its claim."""
    listed = {}
    for pod in wait_for(lambda: running(kind, namespace, job), what=f"{job} running", timeout=TIMEOUT):
        name = pod["metadata"]["name"]

        def printed(name: str = name) -> str | None:
            log = kind.kubectl("logs", "-n", namespace, name, check=False).stdout
            return log if log.startswith("GPU ") else None

        log = wait_for(printed, what=f"{name}'s nvidia-smi -L")
        (claim,) = pod["status"]["resourceClaimStatuses"]
        allocated = list(allocated_uuids(kind, namespace, claim["resourceClaimName"]).values())
        assert smi_uuids(log) == allocated and len(allocated) == 1, (name, log, allocated)
        listed[allocated[0]] = pod["spec"]["nodeName"]
    return listed


def started_by(kind: KindCluster, namespace: str, job: str) -> str | None:
    """What Kueue's `Started` event on the Job says, once there."""
    events = kind.get("events", "-n", namespace, "--field-selector", f"involvedObject.name={job}")["items"]
    return next((e["message"] for e in events if e["reason"] == "Started"), None)


def test_kueue_admits_gpu_jobs_by_quota_and_their_pods_see_their_gpus(
    kind_cluster: KindCluster, queues: str
) -> None:
    kind, ns = kind_cluster, queues
    gpus = slice_gpus(kind)
    assert len(gpus) == PODS  # the lab's two T10 and one A5000

    # Within quota: 3 pods x 1 GPU of the 4 of ClusterQueue `gpus`; each pod gets one of the lab's GPUs.
    first = create_job(kind, JOB, ns)
    w = wait_for(lambda: admitted(kind, first, ns), what=f"{first} admitted", timeout=TIMEOUT)
    assert w["status"]["admission"]["clusterQueue"] == "gpus"
    assert usage(w) == {"nvidia.com/gpu": str(PODS)}
    assert not suspended(kind, first, ns)  # Kueue let it start
    message = wait_for(lambda: started_by(kind, ns, first), what=f"{first}'s Started event", timeout=60)
    assert message == "Admitted by clusterQueue gpus"
    assert gpus_listed(kind, ns, first) == gpus

    # Over the unused quota (3 more, 1 left): suspended by Kueue's webhook (the example asks for no
    # suspension), Pending, no pods. (The first Job's suspension is too short to observe without a race.)
    assert "suspend" not in docs(JOB)[-1]["spec"]
    second = create_job(kind, JOB, ns)
    w = wait_for(lambda: refused(kind, second, ns), what=f"{second} pending", timeout=TIMEOUT)
    message = condition(w, "QuotaReserved")["message"]
    assert "insufficient unused quota for nvidia.com/gpu in flavor nvidia, 2 more needed" in message, message
    assert suspended(kind, second, ns)
    assert not kind.get("pods", "-n", ns, "-l", f"job-name={second}")["items"]

    # The first Job deleted: its quota is free, the second is admitted and its pods get the GPUs.
    kind.kubectl(
        "delete", "job", first, "-n", ns, "--cascade=foreground", "--wait", "--timeout=120s", timeout=130
    )
    w = wait_for(lambda: admitted(kind, second, ns), what=f"{second} admitted", timeout=TIMEOUT)
    assert usage(w) == {"nvidia.com/gpu": str(PODS)}
    assert gpus_listed(kind, ns, second) == gpus
