"""Karpenter launching nodes for pods from zero nodes: a one-GPU claim pod beside a claimless pod, in one run.

    python bench/karpenter.py                  # 3 rounds, then a wave of 50 mixed claim pods
    python bench/karpenter.py --rounds 1 --json out.json

Brings up a local cluster with no node, real Karpenter (`fakeplugin cluster up --with karpenter`) and the
instance types of examples/karpenter/inventory.yaml. Each round, from zero nodes:

  anchor     a pod without a claim asking for one CPU: Karpenter launches the cheapest type (cpu-8x), kwok
             makes the node Ready, the scheduler binds the pod, kwok starts it
  claim      a pod with a claim for one T4 (examples/karpenter/claims.yaml's one-t4): Karpenter simulates
             the claim on the templates and launches gpu-t4-1x, the fleet publishes the node's pool,
             Karpenter initializes the node, the scheduler allocates the claim, the fleet prepares it, kwok
             starts the pod

each timed from the pod's creation until it is Running (one watch of pods), then deleted and timed until
Karpenter has removed the node. For the claim pod also the fleet's publish time: the node's creation to
its first ResourceSlice (one watch each). Then a wave: 30 one-T4, 10 MIG 1g.5gb and 10 eight-H100 pods at
once, timed until all run, and until every node is gone after they are deleted.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from common import (
    NAMESPACE,
    PodWatch,
    cluster_arguments,
    create,
    exit_on_sigterm,
    machine,
    median_max,
    report,
    say,
    wait_until,
)

from fakeplugin.cluster import Cluster, karpenter
from fakeplugin.fleet.api import FleetKube
from fakeplugin.kube import Kube, new_api_client

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "karpenter"
NODES = "/api/v1/nodes"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TIMEOUT = 600.0


class FirstSeen(threading.Thread):
    """When each object of `path` was first seen (monotonic), keyed by `key(obj)`, from one watch."""

    def __init__(self, kube: Kube, path: str, key: Any) -> None:
        super().__init__(daemon=True)
        self.kube, self.path, self.key = kube, path, key
        self.at: dict[str, float] = {}
        self.names: set[str] = set()  # the objects there now
        self.stop = threading.Event()

    def _seen(self, obj: dict[str, Any]) -> None:
        self.at.setdefault(self.key(obj), time.monotonic())
        self.names.add(obj["metadata"]["name"])

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                objs, version = self.kube.list(self.path)
                self.names = set()
                for obj in objs:
                    self._seen(obj)
                for event in self.kube.watch(self.path, resource_version=version, timeout_seconds=60):
                    if event["type"] == "DELETED":
                        self.names.discard(event["object"]["metadata"]["name"])
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self._seen(event["object"])
            except Exception:  # the watch broke (e.g. the cluster is going down): list again, or stop
                self.stop.wait(1.0)


def pod(name: str, claim_template: str | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ctr", "image": "ubuntu:22.04"}
    spec: dict[str, Any] = {"containers": [container]}
    if claim_template:
        container["resources"] = {"claims": [{"name": "gpus"}]}
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": claim_template}]
    else:
        container["resources"] = {"requests": {"cpu": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def to_zero(cluster: Cluster, nodes: FirstSeen) -> float:
    """Delete every pod; seconds until Karpenter has removed every node."""
    cluster.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=300s", timeout=320)
    return wait_until(
        "every node removed", lambda: not nodes.names, TIMEOUT, lambda: f"{len(nodes.names)} nodes"
    )


def one_pod(
    cluster: Cluster, watch: PodWatch, nodes: FirstSeen, slices: FirstSeen, name: str, claim: str | None
) -> dict[str, float]:
    before = set(nodes.at)
    t0 = time.monotonic()
    create(cluster, [pod(name, claim)])
    running = wait_until(f"{name} Running", lambda: watch.running() == 1, TIMEOUT)
    (node,) = set(nodes.at) - before
    result = {"to_running_s": round(running, 2), "node_seen_s": round(nodes.at[node] - t0, 2)}
    if claim:
        result["publish_s"] = round(slices.at[node] - nodes.at[node], 2)
    result["scale_down_s"] = round(to_zero(cluster, nodes), 1)
    return result


def wave(cluster: Cluster, watch: PodWatch, nodes: FirstSeen) -> dict[str, float]:
    mix = {"t4": ("one-t4", 30), "mig": ("one-mig-1g5gb", 10), "h100": ("eight-h100", 10)}
    pods = [pod(f"{kind}-{i}", template) for kind, (template, n) in mix.items() for i in range(n)]
    before = set(nodes.at)
    create(cluster, pods)
    running = wait_until(
        "50 pods Running", lambda: watch.running() == len(pods), TIMEOUT, lambda: f"{watch.running()} Running"
    )
    return {
        "pods": len(pods),
        "to_all_running_s": round(running, 1),
        "nodes": len(set(nodes.at) - before),
        "scale_down_s": round(to_zero(cluster, nodes), 1),
    }


def main() -> int:
    parser = cluster_arguments(__doc__, "/tmp/fakeplugin-bench-karpenter")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    exit_on_sigterm()
    cluster = Cluster.up(EXAMPLES / "inventory.yaml", args.state_dir, karpenter=karpenter.request())
    results: dict[str, Any] = {"machine": machine()}
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        templates = [d for d in yaml.safe_load_all((EXAMPLES / "claims.yaml").read_text()) if d]
        create(
            cluster,
            [
                {**t, "metadata": {**t["metadata"], "namespace": NAMESPACE}}
                for t in templates
                if t["kind"] == "ResourceClaimTemplate"
            ],
        )
        api = new_api_client(str(cluster.kubeconfig))
        kube = Kube(api)
        watch = PodWatch(FleetKube(api))
        nodes = FirstSeen(kube, NODES, lambda o: o["metadata"]["name"])
        slices = FirstSeen(kube, SLICES, lambda o: o["spec"].get("nodeName", ""))
        for thread in (watch, nodes, slices):
            thread.start()
        rounds = []
        for r in range(args.rounds):
            say(f"round {r + 1} of {args.rounds}")
            anchor = one_pod(cluster, watch, nodes, slices, f"anchor-{r}", None)
            claim = one_pod(cluster, watch, nodes, slices, f"claim-{r}", "one-t4")
            say(f"  anchor {anchor}, claim {claim}")
            rounds.append({"anchor": anchor, "claim": claim})
        anchor_s = median_max([r["anchor"]["to_running_s"] for r in rounds])
        claim_s = median_max([r["claim"]["to_running_s"] for r in rounds])
        publish_s = median_max([r["claim"]["publish_s"] for r in rounds])
        results.update(
            rounds=rounds,
            anchor_to_running_s=anchor_s,
            claim_to_running_s=claim_s,
            publish_s=publish_s,
            # The goal: the claim pod within twice the claimless one plus the fleet's publish time.
            goal_s=round(2 * anchor_s["median"] + publish_s["median"], 2),
        )
        say("a wave of 50 mixed claim pods")
        results["wave"] = wave(cluster, watch, nodes)
        for thread in (watch, nodes, slices):
            thread.stop.set()
    finally:
        if not args.keep:
            cluster.down()
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
