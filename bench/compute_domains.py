"""ComputeDomains at rack scale: NVL72 racks of simulated GB200 trays, one 18-node job per rack at once.

    python bench/compute_domains.py                 # 4 racks (72 nodes, 288 GPUs), 4 ComputeDomains
    python bench/compute_domains.py --racks 1       # one rack, one ComputeDomain of 18 nodes
    python bench/compute_domains.py --json out.json

Brings up a local cluster (`fakeplugin cluster up`) whose inventory is --racks entries of 18 simulated
`gb200` nodes x 4 GPUs (`kubelet: false`), each rack its own NVLink clique: kwok plays the nodes, one
`fakeplugin fleet --compute-domains` is both kubelet plugins of every node and plays each IMEX daemon, and
`fakeplugin compute-domain-controller` runs as in NVIDIA's chart. Then per rack one job of 18 pods, each pod
4 GPUs (a ResourceClaim of its own) and the rack's ComputeDomain channel, placed on its rack by the clique
label; all racks' jobs at once (the ComputeDomains first, the pods once their channel templates exist).
Measured, from one watch of pods and one of ComputeDomains:

  anchor     the same pods without ComputeDomain or channel, first: from the moment the last of a rack's
             pods is bound (spec.nodeName seen) to the moment all of them are Running
  ready      per ComputeDomain: from the last of its pods bound to its status Ready (every daemon of its
             nodes in its clique, Ready, as the controller sums it every 2 s)
  running    per job: from the last pod bound to every pod Running (their channel claims wait for Ready;
             a failed prepare is retried after 2 s doubling to 30 s)

Target (issue 18): a ComputeDomain of 18 simulated nodes Ready <= 10 s after its pods are bound.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    cluster_arguments,
    create,
    exit_on_sigterm,
    inventory_beside,
    machine,
    median_max,
    report,
    say,
    wait_until,
)

from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import Cluster
from fakeplugin.kube import Kube, new_api_client
from fakeplugin.runtime.informer import Source, list_and_watch
from fakeplugin.testing import container, device_request, pod, resource_claim

NAMESPACE = "bench-cd"
TRAYS = 18  # compute trays of an NVL72 rack, 4 GPUs each


class Seen:
    """When each object was first seen meeting a condition, from a watch (time.monotonic())."""

    def __init__(
        self, kube: Kube, path: str, conditions: dict[str, Callable[[dict[str, Any]], bool]]
    ) -> None:
        self.at: dict[str, dict[str, float]] = {c: {} for c in conditions}  # condition → name → time
        self._conditions = conditions
        self._kube, self._path = kube, path
        self.stop = threading.Event()

    def start(self) -> None:
        synced = threading.Event()
        threading.Thread(
            target=list_and_watch,
            args=(self._kube, Source(self._path)),
            kwargs={
                "stop": self.stop,
                "on_list": lambda objs: [self._event("ADDED", o) for o in objs],
                "on_event": self._event,
                "synced": synced,
            },
            daemon=True,
        ).start()
        synced.wait(60)

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        now, name = time.monotonic(), obj["metadata"]["name"]
        for condition, met in self._conditions.items():
            if kind == "DELETED":
                self.at[condition].pop(name, None)
            elif met(obj):
                self.at[condition].setdefault(name, now)


def racks_inventory(state_dir: Path, racks: int) -> Path:
    """`racks` NVL72 racks of simulated trays, each its own clique, beside `state_dir`."""
    return inventory_beside(
        state_dir,
        [
            {
                "namePrefix": f"rack-{r}-",
                "replicas": TRAYS,
                "kubelet": False,
                "gpus": [{"profile": "gb200", "count": 4}],
                "fabric": {"clique": 1, "clusterUUID": cluster_uuid(r)},
            }
            for r in range(racks)
        ],
    )


def cluster_uuid(rack: int) -> str:
    return f"4b1e8f2a-57c3-4c1d-9a5e-{rack:012x}"


def job(name: str, rack: int, *, channel: bool) -> list[dict[str, Any]]:
    """18 pods of 4 GPUs (a claim of its own each, by name) on `rack`; with `channel`, its ComputeDomain and
    the CD's channel template in each pod (one template per pod: see tests/e2e/test_compute_domains_fleet.py
    `job` for why not two)."""
    objects: list[dict[str, Any]] = []
    if channel:
        objects.append(
            {
                "apiVersion": api.API_VERSION,
                "kind": api.COMPUTE_DOMAIN_KIND,
                "metadata": {"name": name},
                "spec": {
                    "numNodes": TRAYS,
                    "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}},
                },
            }
        )
    for i in range(TRAYS):
        claims = {"gpus": {"resourceClaimName": f"{name}-{i}-gpus"}}
        if channel:
            claims["channel"] = {"resourceClaimTemplateName": f"{name}-channel"}
        objects.append(resource_claim(f"{name}-{i}-gpus", device_request(count=4)))
        objects.append(
            pod(
                f"{name}-{i}",
                [container("worker", claims=list(claims))],
                claims=claims,
                grace_period_s=0,
                nodeSelector={api.GPU_CLIQUE_LABEL: f"{cluster_uuid(rack)}.1"},
            )
        )
    return objects


def in_namespace(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**o, "metadata": {**o["metadata"], "namespace": NAMESPACE}} for o in objects]


def run_wave(
    cluster: Cluster, kube: Kube, pods: Seen, domains: Seen, racks: int, *, channel: bool
) -> list[dict[str, Any]]:
    template_path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"
    names = [f"{'cd' if channel else 'plain'}-{r}" for r in range(racks)]
    jobs = [job(name, r, channel=channel) for r, name in enumerate(names)]
    # The CDs first, their pods once the controller made the channel templates (as tests/harness/domains.py
    # start_domain_job does).
    for objects in jobs:
        create(cluster, in_namespace([o for o in objects if o["kind"] == api.COMPUTE_DOMAIN_KIND]))
    templates = {f"{n}-channel" for n in names} if channel else set()
    wait_until(
        "the controller's channel templates",
        lambda: templates <= {t["metadata"]["name"] for t in kube.list(template_path)[0]},
        60,
    )
    for objects in jobs:
        create(cluster, in_namespace([o for o in objects if o["kind"] != api.COMPUTE_DOMAIN_KIND]))
    members = {n: [f"{n}-{i}" for i in range(TRAYS)] for n in names}
    wait_until(
        "every pod Running",
        lambda: all(p in pods.at["running"] for ps in members.values() for p in ps),
        600,
    )
    if channel:
        wait_until("every ComputeDomain Ready", lambda: all(n in domains.at["ready"] for n in names), 60)
    out = []
    for name in names:
        bound = max(pods.at["bound"][p] for p in members[name])
        result = {
            "job": name,
            "runningAfterBoundSeconds": round(max(pods.at["running"][p] for p in members[name]) - bound, 2),
        }
        if channel:
            result["readyAfterBoundSeconds"] = round(domains.at["ready"][name] - bound, 2)
        out.append(result)
        say(f"  {result}")
    pod_names = [p for ps in members.values() for p in ps]
    cluster.kubectl("delete", "pod", *pod_names, "-n", NAMESPACE, "--wait=true", "--timeout=600s")
    if channel:
        cluster.kubectl("delete", "computedomain", *names, "-n", NAMESPACE, "--wait=true", "--timeout=300s")
    gpu_claims = [f"{n}-{i}-gpus" for n in names for i in range(TRAYS)]
    cluster.kubectl("delete", "resourceclaim", *gpu_claims, "-n", NAMESPACE, "--wait=true", "--timeout=300s")
    return out


def summary(results: list[dict[str, Any]], key: str) -> dict[str, float]:
    return median_max([r[key] for r in results])


def main() -> int:
    parser = cluster_arguments(__doc__, "/tmp/fakeplugin-bench-cd")
    parser.add_argument("--racks", type=int, default=4)
    args = parser.parse_args()
    exit_on_sigterm()

    path = racks_inventory(args.state_dir, args.racks)
    say(f"cluster up: {args.racks} racks x {TRAYS} simulated GB200 trays")
    started = time.monotonic()
    cluster = Cluster.up(path, args.state_dir)
    results: dict[str, Any] = {
        "machine": machine(),
        "racks": args.racks,
        "nodes": args.racks * TRAYS,
        "gpus": args.racks * TRAYS * 4,
        "clusterUpSeconds": round(time.monotonic() - started, 1),
    }
    try:
        kube = Kube(new_api_client(str(cluster.kubeconfig)))
        cluster.kubectl("create", "namespace", NAMESPACE)
        pods = Seen(
            kube,
            f"/api/v1/namespaces/{NAMESPACE}/pods",
            {
                "bound": lambda o: bool(o["spec"].get("nodeName")),
                "running": lambda o: (o.get("status") or {}).get("phase") == "Running",
            },
        )
        domains = Seen(
            kube,
            api.compute_domains_path(NAMESPACE),
            {"ready": lambda o: (o.get("status") or {}).get("status") == api.STATUS_READY},
        )
        pods.start()
        domains.start()
        say("anchor: the same jobs without ComputeDomains")
        anchor = run_wave(cluster, kube, pods, domains, args.racks, channel=False)
        say("ComputeDomains: one per rack, all at once")
        cds = run_wave(cluster, kube, pods, domains, args.racks, channel=True)
        pods.stop.set()
        domains.stop.set()
        results["anchor"] = {"jobs": anchor, "runningAfterBound": summary(anchor, "runningAfterBoundSeconds")}
        results["computeDomains"] = {
            "jobs": cds,
            "readyAfterBound": summary(cds, "readyAfterBoundSeconds"),
            "runningAfterBound": summary(cds, "runningAfterBoundSeconds"),
        }
    finally:
        if not args.keep:
            cluster.down()
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
