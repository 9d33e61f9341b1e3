"""The call log on a real cluster: the real kubelet's calls for a pod's claim, as `Cluster.calls` and
`fakeplugin calls` show them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fakeplugin.cluster import Cluster
from fakeplugin.testing import claim_pod
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import A5000, T10, product_claim, running

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


def calls_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "fakeplugin", "calls", f"--state-dir={cluster.layout.root}", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)


def test_prepare_and_unprepare_of_a_pods_claim_are_in_its_nodes_call_log(
    cluster: Cluster, namespace: str
) -> None:
    apply(
        cluster,
        namespace,
        product_claim("logged", "NVIDIA T10"),
        claim_pod("logged", {"resourceClaimName": "logged"}),
    )
    wait_for(lambda: running(cluster, namespace, "logged"), what="pod logged Running")
    uid = get(cluster, "resourceclaim", "logged", "-n", namespace)["metadata"]["uid"]
    ref = f"{namespace}/logged"

    (prepared,) = cluster.calls(T10, claim=ref)
    assert (prepared["method"], prepared["claims"], prepared["result"]) == (
        "NodePrepareResources",
        [f"{ref}:{uid}"],
        "ok",
    )
    assert prepared["service"] == "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", "the kubelet speaks v1 first"
    assert cluster.calls(A5000, claim=ref) == []
    registrations = cluster.calls(T10, method="NotifyRegistrationStatus")
    assert registrations and all(r["registered"] and r["result"] == "ok" for r in registrations)
    assert registrations[0]["time"] < prepared["time"]

    cluster.kubectl("delete", "pod", "logged", "-n", namespace, "--wait=false")
    (unprepared,) = wait_for(
        lambda: cluster.calls(T10, claim=ref, method="NodeUnprepareResources"), what="NodeUnprepareResources"
    )
    assert (unprepared["claims"], unprepared["result"]) == ([f"{ref}:{uid}"], "ok")

    table = calls_cli(cluster, f"--node={T10}", f"--claim={ref}")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["TIME", "METHOD", "CLAIMS", "RESULT", "DURATION"]
    assert [row.split()[1:4] for row in rows] == [
        ["NodePrepareResources", ref, "ok"],
        ["NodeUnprepareResources", ref, "ok"],
    ]
    as_json = calls_cli(cluster, f"--claim={ref}", "--json")  # every kubelet node
    assert as_json.returncode == 0, as_json.stderr
    assert [json.loads(line) for line in as_json.stdout.splitlines()] == [
        {"node": T10, **prepared},
        {"node": T10, **unprepared},
    ]
