"""Kueue admitting one-GPU Jobs on simulated nodes, beside the same Jobs without Kueue, in one run.

    python bench/kueue.py                         # 100 simulated H100 nodes x 8 GPUs, 500 Jobs, 2 rounds
    python bench/kueue.py --jobs 100 --nodes 20   # a quick look
    python bench/kueue.py --json out.json

Brings up a local cluster with real Kueue (`fakeplugin cluster up --with kueue`, examples/kueue/config.yaml:
gpu.nvidia.com counted as `nvidia.com/gpu`) and --nodes simulated H100 nodes served by `fakeplugin fleet`.
Each round, twice --jobs Jobs of one pod with one GPU (a claim from one ResourceClaimTemplate):

  anchor     without a queue name (Kueue leaves them alone): from the first Job's creation until every pod
             is Running (the scheduler allocated, the fleet prepared, kwok started it), then all deleted
  kueue      the same Jobs queued in a ClusterQueue with quota for all of them: Kueue's webhook suspends
             each, Kueue admits it (its DRA quota: the claim template read, the device class mapped) and
             unsuspends it, then the same path; until every pod is Running, then all deleted

Reported per phase: seconds, Jobs/s, the ratio kueue/anchor, and the CPU seconds each process of the cluster
used (/proc/<pid>/stat), Kueue's manager included; plus Kueue's admission latency (Job created to Workload
Admitted: median and max, from one watch of Workloads).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from common import (
    NAMESPACE,
    PodWatch,
    cluster_arguments,
    cpu_by_process,
    create,
    exit_on_sigterm,
    machine,
    median_max,
    report,
    say,
    wait_until,
)
from fleet import simulated_inventory

from fakeplugin.cluster import Cluster, kueue
from fakeplugin.fleet.api import FleetKube
from fakeplugin.kube import Kube, new_api_client
from fakeplugin.runtime.informer import Source, list_and_watch

QUEUE = "gpus"
WORKLOADS = f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads"


class Admissions(threading.Thread):
    """When each Workload (by its Job's name) was first seen Admitted, from one watch."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.at: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        def seen(_kind: str, w: dict[str, Any]) -> None:
            owners = [o["name"] for o in w["metadata"].get("ownerReferences", []) if o["kind"] == "Job"]
            conditions = (w.get("status") or {}).get("conditions", [])
            if owners and any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
                self.at.setdefault(owners[0], time.monotonic())

        list_and_watch(
            self.kube,
            Source(WORKLOADS),
            stop=self.stop,
            on_list=lambda ws: [seen("", w) for w in ws],
            on_event=seen,
            synced=threading.Event(),
        )


def jobs(count: int, *, queued: bool, prefix: str) -> list[dict[str, Any]]:
    labels = {"kueue.x-k8s.io/queue-name": QUEUE} if queued else {}
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{prefix}-{i}", "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                        "containers": [
                            {"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}
                        ],
                    }
                }
            },
        }
        for i in range(count)
    ]


def queues(gpus: int) -> list[dict[str, Any]]:
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "nvidia"},
    }
    quota = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    cluster_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "nvidia", "resources": [quota]}],
                }
            ],
        },
    }
    local_queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": QUEUE, "namespace": NAMESPACE},
        "spec": {"clusterQueue": QUEUE},
    }
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            }
        },
    }
    return [flavor, cluster_queue, local_queue, template]


def phase(
    cluster: Cluster,
    kube: FleetKube,
    watch: PodWatch,
    admissions: Admissions,
    count: int,
    *,
    queued: bool,
    name: str,
) -> dict[str, Any]:
    before = cpu_by_process(cluster)
    created = time.monotonic()
    create(cluster, jobs(count, queued=queued, prefix=name))
    wait_until(
        f"{count} pods Running", lambda: watch.running() >= count, 1800, lambda: f"{watch.running()} Running"
    )
    elapsed = time.monotonic() - created
    after = cpu_by_process(cluster)
    result: dict[str, Any] = {
        "jobs": count,
        "seconds": round(elapsed, 1),
        "jobsPerSecond": round(count / elapsed, 1),
        "cpuSeconds": {n: round(after[n] - before.get(n, 0.0), 1) for n in sorted(after)},
    }
    if queued:
        latencies = [
            admissions.at[j] - created for j in (f"{name}-{i}" for i in range(count)) if j in admissions.at
        ]
        result["admittedSeconds"] = median_max(latencies, 1)
    say(f"  {name}: {count} Jobs Running in {elapsed:.1f} s ({count / elapsed:.1f} Jobs/s)")
    cluster.kubectl(
        "delete", "jobs", "--all", "-n", NAMESPACE, "--cascade=background", "--wait=false", timeout=300
    )
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    wait_until(
        "every pod and claim gone",
        lambda: kube.count(pods) == 0 and kube.count(claims) == 0,
        1800,
        lambda: f"{kube.count(pods)} pods, {kube.count(claims)} claims left",
    )
    return result


def main() -> int:
    parser = cluster_arguments(__doc__, "/tmp/fakeplugin-bench-kueue")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8, help="H100 GPUs per node")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.jobs > args.nodes * args.gpus:
        parser.error(f"--jobs {args.jobs} is more than the {args.nodes * args.gpus} GPUs of the nodes")
    exit_on_sigterm()

    inventory = simulated_inventory(args.state_dir, "h100-80gb-hbm3", args.nodes, args.gpus)
    cluster = Cluster.up(inventory, args.state_dir, kueue=kueue.request(""))
    results: dict[str, Any] = {"machine": machine()}
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        create(cluster, queues(args.jobs))
        api = new_api_client(str(cluster.kubeconfig))
        kube = FleetKube(api)
        watch, admissions = PodWatch(kube), Admissions(Kube(api))
        watch.start()
        admissions.start()
        rounds = []
        for r in range(args.rounds):
            say(f"round {r + 1} of {args.rounds}")
            anchor = phase(cluster, kube, watch, admissions, args.jobs, queued=False, name=f"anchor{r}")
            queued = phase(cluster, kube, watch, admissions, args.jobs, queued=True, name=f"kueue{r}")
            rounds.append(
                {"anchor": anchor, "kueue": queued, "ratio": round(queued["seconds"] / anchor["seconds"], 2)}
            )
        results.update(nodes=args.nodes, gpus=args.gpus, jobs=args.jobs, rounds=rounds)
        watch.stop.set()
        admissions.stop.set()
    finally:
        if not args.keep:
            cluster.down()
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
