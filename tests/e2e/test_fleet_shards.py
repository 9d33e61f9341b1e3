"""Two fleet processes (`cluster up --fleet-shards 2`, what `up` does above 1000 simulated nodes) share the
simulated nodes: each publishes the slices of its shard only (fakeplugin.fleet.shard), every node's once,
and claim pods on the nodes of both shards run; after a kill -9 of both they come back as they were, and
every claim is unprepared when its pod goes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.cluster import Cluster
from fakeplugin.fleet.shard import Shard
from fakeplugin.testing import claim_pod
from tests.harness.host import own_cluster
from tests.harness.kube import apply, items, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "shards"
NODES = [f"h100-{i}" for i in range(24)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    inventory = {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [
            {
                "namePrefix": "h100-",
                "replicas": len(NODES),
                "kubelet": False,
                "gpus": [{"profile": "h100-80gb-hbm3", "count": 1}],
            }
        ],
    }
    with own_cluster(tmp_path_factory, "shards", inventory, NAMESPACE, fleet_shards=2) as c:
        yield c


def test_each_fleet_publishes_its_shard_and_pods_run_on_both(cluster: Cluster) -> None:
    fleets = {p.name: p for p in cluster.status() if p.name.startswith("fleet")}
    assert set(fleets) == {"fleet/0", "fleet/1"} and all(p.running for p in fleets.values())
    for i in (0, 1):
        log = Path(fleets[f"fleet/{i}"].log).read_text()
        assert f"serving shard {i}/2 of the simulated nodes" in log
        published = [int(n) for n in re.findall(r"published the slices of (\d+) nodes", log)]
        assert published[0] == sum(Shard(i, 2).owns(n) for n in NODES), published  # its share, no more

    slices = items(cluster, "resourceslices")
    assert sorted(s["spec"]["nodeName"] for s in slices) == sorted(NODES)  # each node's once
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            }
        },
    }
    pods = [claim_pod(f"p{i}", {"resourceClaimTemplateName": "one-gpu"}) for i in range(len(NODES))]
    apply(cluster, NAMESPACE, template, *pods)

    def running() -> list[str] | None:
        got = items(cluster, "pods", "-n", NAMESPACE)
        nodes = [p["spec"].get("nodeName", "") for p in got if p["status"].get("phase") == "Running"]
        return nodes if len(nodes) == len(NODES) else None

    on = wait_for(running, what="every claim pod Running", timeout=180)
    assert sorted(on) == sorted(NODES)  # one GPU per node: every node, so both shards, prepared
    # Both shards crash and come back as they were (the same two processes, each its own half).
    cluster.kill_fleet()
    cluster.start_fleet()
    again = {p.name: p for p in cluster.status() if p.name.startswith("fleet")}
    assert set(again) == {"fleet/0", "fleet/1"} and all(p.running for p in again.values())
    assert all(again[n].pid != fleets[n].pid for n in again)
    cluster.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    specs = list(cluster.layout.root.glob("nodes/*/cdi/k8s.gpu.nvidia.com-claim_*.yaml"))
    assert specs == []  # each shard unprepared the pods of its half
    assert (
        json.loads(cluster.kubectl("get", "resourceclaims", "-n", NAMESPACE, "-o", "json").stdout)["items"]
        == []
    )
