"""Fleet scale: a thousand simulated GPU nodes on this machine, thousands of claim pods through them.

    python bench/fleet.py                         # 1000 nodes x 8 H200, 2 waves of 4000 pods
    python bench/fleet.py --nodes 100 --pods 400  # a quick look
    python bench/fleet.py --json out.json --keep  # keep the cluster to look around
    python bench/fleet.py --nodes 200 --pods 400 --soak 5   # RSS per cycle
    python bench/fleet.py --nodes 5000 --pods 10000 --waves 1 --claimless   # claim pods vs claimless pods
    python bench/fleet.py --operator-labels --rounds 2   # publish with the GPU Operator's labels vs without

Brings up a local cluster (`fakeplugin cluster up`: etcd, kube-apiserver, -scheduler, -controller-manager,
kwok for the simulated nodes, one `fakeplugin fleet` for their DRA side) whose inventory is one entry:
`namePrefix: h200-`, `replicas: --nodes`, `kubelet: false`, --gpus H200 each. Measured:

  publish    from the fleet process's start to the newest ResourceSlice's creationTimestamp (1 s
             resolution), once every node's slice is there
  waves      a Deployment of --pods replicas, each pod one GPU from a ResourceClaimTemplate: from the
             Deployment's creation (or scale-up) until every pod is Running (the fleet prepared each
             claim first: kwok's stages gate Running on it); pods/s = pods / that time. Then scale to 0:
             until every pod and every claim is gone and every CDI spec removed (every device
             returned); then the next wave.
  cpu        CPU seconds each cluster process used during each wave (/proc/<pid>/stat): where the time
             goes when the scheduler or the API server, not the fleet, is the limit
  memory     RSS of the fleet once published and idle, and the peaks (fleet, whole cluster: the sum of
             every process of the cluster), sampled every second
  claimless  with --claimless, after the claim waves, one wave of --pods pods without claims on the
             same nodes, measured the same way: the control plane's ceiling here. Reported: claim
             pods/s over claimless pods/s (the first claim wave's), and each process's CPU ms per pod
  soak       RSS of the fleet after each wave's scale-down (every pod and claim gone, SETTLE_SECONDS
             later): `--soak N` runs N waves and reports the RSS per cycle and how much it grew per pod
             served after the first cycle (flat: nothing kept per pod or claim once it is gone)

  operator labels  with --operator-labels, instead of the above: --rounds times a cluster whose nodes have
             no GPU Operator (`gpuOperator: none`), then one whose nodes have its labels (`clusterPolicy`,
             kept by the fleet's `--gpu-operator-labels`), each fresh: publish as above and, finer, when
             a 0.2 s poll of the slices' count first saw all of them (secondsToEverySlice), the fleet's CPU
             from its start until every slice is there and in the IDLE_SECONDS after (kwok's node
             heartbeats are Node events the labels are checked on), per node; then the medians, and
             labels over none ("labelled")

It also checks that every Running pod's claim has its CDI spec on its node (in the cluster's state dir).
Everything is deleted at the end unless --keep.
"""

from __future__ import annotations

import datetime
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import (
    NAMESPACE,
    PodWatch,
    cluster_arguments,
    cpu_by_process,
    cpu_seconds,
    create,
    exit_on_sigterm,
    inventory_beside,
    machine,
    median_max,
    report,
    rss_kib,
    say,
    start_epoch,
    wait_until,
)

from fakeplugin.cluster import Cluster
from fakeplugin.fleet.api import FleetKube
from fakeplugin.kube import NODES, SLICES, new_api_client

SETTLE_SECONDS = 5.0  # after a scale-down, before the fleet's RSS is read
IDLE_SECONDS = 30.0  # --operator-labels: the idle window after publishing whose fleet CPU is measured


class Sampler(threading.Thread):
    """Every second: the RSS of each of the cluster's processes; keeps the peaks."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop = threading.Event()
        self.peak_total = 0
        self.peak: dict[str, int] = {}

    def run(self) -> None:
        while not self.stop.wait(1.0):
            total = 0
            for p in self.cluster.status():
                if not p.running:
                    continue
                total += p.rss_bytes
                self.peak[p.name] = max(self.peak.get(p.name, 0), p.rss_bytes)
            self.peak_total = max(self.peak_total, total)


def simulated_inventory(
    state_dir: Path, profile: str, nodes: int, gpus: int, gpu_operator: str = "clusterPolicy"
) -> Path:
    """An inventory of `nodes` simulated nodes `<profile>-0..` with `gpus` GPUs each, beside `state_dir`,
    in the GPU Operator mode `gpu_operator`."""
    node = {
        "namePrefix": f"{profile}-",
        "replicas": nodes,
        "kubelet": False,
        "gpuOperator": gpu_operator,
        "gpus": [{"profile": profile, "count": gpus}],
    }
    return inventory_beside(state_dir, [node])


def publish(kube: FleetKube, fleets: list[Any], up_seconds: float) -> dict[str, Any]:
    """Every slice of the fleet processes `fleets`, and when the newest was made after their start."""
    slices, _ = kube.list(SLICES, field_selector="spec.driver=gpu.nvidia.com")
    newest = max(
        datetime.datetime.fromisoformat(s["metadata"]["creationTimestamp"].replace("Z", "+00:00")).timestamp()
        for s in slices
    )
    return {
        "slices": len(slices),
        "devices": sum(len(s["spec"].get("devices") or []) for s in slices),
        "secondsFromFleetStart": round(newest - min(start_epoch(f.pid) for f in fleets), 1),
        "clusterUpSeconds": round(up_seconds, 1),
    }


class SliceClock(threading.Thread):
    """While `cluster up` runs: every POLL_SECONDS the number of ResourceSlices (a one-item list's count);
    `done` is when it first reached `slices`. Finer than the slices' creationTimestamps (whole seconds),
    which at a few seconds of publishing are a quarter of the time."""

    POLL_SECONDS = 0.2

    def __init__(self, kubeconfig: Path, slices: int) -> None:
        super().__init__(daemon=True)
        self.kubeconfig, self.slices = kubeconfig, slices
        self.done = 0.0

    def run(self) -> None:
        kube = None
        while not self.done:
            time.sleep(self.POLL_SECONDS)
            try:
                kube = kube or FleetKube(new_api_client(str(self.kubeconfig)))
                if kube.count(SLICES) >= self.slices:
                    self.done = time.time()
            except Exception:  # no kubeconfig or API server yet
                kube = None


def labelled_publish(args: Any, gpu_operator: str) -> dict[str, Any]:
    """One fresh cluster of --nodes in `gpu_operator` mode: publish, the fleet's CPU to publish and idle."""
    inventory = simulated_inventory(args.state_dir, "h200", args.nodes, args.gpus, gpu_operator)
    say(f"cluster up: {args.nodes} simulated nodes x {args.gpus} H200, gpuOperator {gpu_operator}")
    clock = SliceClock(args.state_dir / "admin.kubeconfig", args.nodes)
    clock.start()
    started = time.time()
    cluster = Cluster.up(inventory, args.state_dir)
    up_seconds = time.time() - started
    try:
        kube = FleetKube(new_api_client(str(cluster.kubeconfig)))
        fleets = [p for p in cluster.status() if p.name.split("/")[0] == "fleet"]
        clock.join(timeout=60)
        result = publish(kube, fleets, up_seconds)
        result["secondsToEverySlice"] = round(clock.done - min(start_epoch(f.pid) for f in fleets), 2)
        published_cpu = sum(cpu_seconds(f.pid) for f in fleets)
        time.sleep(IDLE_SECONDS)
        idle_cpu = sum(cpu_seconds(f.pid) for f in fleets) - published_cpu
        present, _ = kube.list(NODES, label_selector="nvidia.com/gpu.present=true", metadata_only=True)
        want = args.nodes if gpu_operator == "clusterPolicy" else 0
        if len(present) != want:
            raise SystemExit(f"gpuOperator {gpu_operator}: {len(present)} nodes labelled, not {want}")
    finally:
        cluster.down()
    result |= {
        "fleetCpuMsPerNodeToPublish": round(published_cpu * 1000 / args.nodes, 2),
        "fleetCpuMsPerNodeIdle": round(idle_cpu * 1000 / args.nodes, 3),
    }
    say(f"  {gpu_operator}: {result}")
    return result


def operator_labels(args: Any) -> dict[str, Any]:
    """--operator-labels: --rounds of (none, clusterPolicy) clusters; medians, and labels over none."""
    modes = ("none", "clusterPolicy")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            runs[mode].append(labelled_publish(args, mode))
    keys = (
        "secondsToEverySlice",
        "secondsFromFleetStart",
        "fleetCpuMsPerNodeToPublish",
        "fleetCpuMsPerNodeIdle",
    )
    medians = {m: {k: median_max([r[k] for r in runs[m]], 3) for k in keys} for m in modes}
    ratio = {
        k: round(medians["clusterPolicy"][k]["median"] / medians["none"][k]["median"], 3)
        for k in keys
        if medians["none"][k]["median"]
    }
    return {"machine": machine(), "nodes": args.nodes, "runs": runs, "medians": medians, "labelled": ratio}


def workload(pods: int, name: str, claims: bool) -> list[dict[str, Any]]:
    """A Deployment of `pods` pods named `name`, each with one GPU from a ResourceClaimTemplate when
    `claims`, else none (the claimless control: the control plane's own rate on the same nodes)."""
    container: dict[str, Any] = {"name": "ctr", "image": "busybox"}
    pod_spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    items: list[dict[str, Any]] = []
    if claims:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        pod_spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        gpu = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
        items.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
                "spec": {"spec": {"devices": {"requests": [gpu]}}},
            }
        )
    items.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "replicas": pods,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
            },
        }
    )
    return items


def cdi_specs(cluster: Cluster) -> int:
    return sum(1 for _ in (cluster.layout.root / "nodes").glob("*/cdi/k8s.gpu.nvidia.com-claim_*.yaml"))


def wave(
    cluster: Cluster,
    kube: FleetKube,
    watch: PodWatch,
    pods: int,
    *,
    first: bool,
    fleet_pids: list[int],
    claims: bool = True,
) -> dict[str, Any]:
    name = "gpu-pods" if claims else "plain-pods"
    pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    before = cpu_by_process(cluster)
    started = time.monotonic()
    if first:
        create(cluster, workload(pods, name, claims))
    else:
        cluster.kubectl("scale", "deployment", name, "-n", NAMESPACE, f"--replicas={pods}")

    wait_until(
        f"{pods} pods Running", lambda: watch.running() >= pods, 1800, lambda: f"{watch.running()} Running"
    )
    elapsed = time.monotonic() - started
    after = cpu_by_process(cluster)
    specs = cdi_specs(cluster)
    if specs != (pods if claims else 0):
        raise SystemExit(f"{pods} pods Running but {specs} CDI specs on the simulated nodes")
    cpu = {n: after[n] - before.get(n, 0.0) for n in sorted(after)}
    result = {
        "claims": claims,
        "pods": pods,
        "seconds": round(elapsed, 1),
        "podsPerSecond": round(pods / elapsed, 1),
        "cpuSeconds": {n: round(v, 1) for n, v in cpu.items()},
        "cpuMsPerPod": {n: round(v * 1000 / pods, 2) for n, v in cpu.items()},
    }
    kind = "claim" if claims else "claimless"
    say(f"  {pods} {kind} pods Running in {elapsed:.1f} s: {pods / elapsed:.1f} pods/s")

    started = time.monotonic()
    cluster.kubectl("scale", "deployment", name, "-n", NAMESPACE, "--replicas=0")
    claims_path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    # terminationGracePeriodSeconds 0: the API server removes each pod at once, and the fleet unprepares
    # from its DELETED event (as a kubelet's reconcile loop would), maybe after the claims are gone.
    wait_until(
        "every pod and claim gone, every CDI spec removed",
        lambda: kube.count(pods_path) == 0 and kube.count(claims_path) == 0 and cdi_specs(cluster) == 0,
        1800,
        lambda: (
            f"{kube.count(pods_path)} pods, {kube.count(claims_path)} claims, "
            f"{cdi_specs(cluster)} CDI specs left"
        ),
    )
    result["scaleDownSeconds"] = round(time.monotonic() - started, 1)
    time.sleep(SETTLE_SECONDS)
    result["fleetRssMiB"] = round(sum(rss_kib(pid)[0] for pid in fleet_pids) / 1024, 1)  # every shard
    say(
        f"  scaled to 0 in {result['scaleDownSeconds']} s; every device returned; "
        f"fleet RSS {result['fleetRssMiB']} MiB"
    )
    return result


def soak(waves: list[dict[str, Any]]) -> dict[str, Any]:
    """The fleet's RSS per cycle, and its growth per pod served after the first cycle."""
    rss = [w["fleetRssMiB"] for w in waves]
    pods_after_first = sum(w["pods"] for w in waves[1:])
    growth = (rss[-1] - rss[0]) * 1024 / pods_after_first if pods_after_first else 0.0
    return {"fleetRssMiBPerCycle": rss, "growthKiBPerPodAfterFirst": round(growth, 3)}


def main() -> int:
    parser = cluster_arguments(__doc__, "/tmp/fakeplugin-bench-fleet")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="H200 GPUs per node")
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--waves", type=int, default=2)
    parser.add_argument("--soak", type=int, metavar="N", help="N waves, reporting the fleet's RSS per cycle")
    parser.add_argument(
        "--claimless",
        action="store_true",
        help="also one wave of claimless pods: the control plane's ceiling",
    )
    parser.add_argument(
        "--operator-labels",
        action="store_true",
        help="only publish, with the GPU Operator's labels and without, on fresh clusters (--rounds)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="--operator-labels: clusters of each mode")
    args = parser.parse_args()
    exit_on_sigterm()
    if args.operator_labels:
        report(operator_labels(args), args.json)
        return 0

    inventory = simulated_inventory(args.state_dir, "h200", args.nodes, args.gpus)
    say(f"cluster up: {args.nodes} simulated nodes x {args.gpus} H200")
    up_started = time.time()
    cluster = Cluster.up(inventory, args.state_dir)
    up_seconds = time.time() - up_started
    results: dict[str, Any] = {
        "machine": machine(),
        "nodes": args.nodes,
    }
    try:
        kube = FleetKube(new_api_client(str(cluster.kubeconfig)))
        # One process, or two shards (fleet/0, fleet/1) above 1000 nodes: the first start counts.
        fleets = [p for p in cluster.status() if p.name.split("/")[0] == "fleet"]
        results["publish"] = publish(kube, fleets, up_seconds)
        say(f"  published: {results['publish']}")
        time.sleep(5)
        results["fleetIdleRssMiB"] = {f.name: round(rss_kib(f.pid)[0] / 1024, 1) for f in fleets}
        sampler = Sampler(cluster)
        sampler.start()
        cluster.kubectl("create", "namespace", NAMESPACE)
        watch = PodWatch(kube)
        watch.start()
        waves = args.soak or args.waves
        results["waves"] = [
            wave(cluster, kube, watch, args.pods, first=i == 0, fleet_pids=[f.pid for f in fleets])
            for i in range(waves)
        ]
        results["soak"] = soak(results["waves"])
        if args.claimless:
            plain = wave(
                cluster, kube, watch, args.pods, first=True, fleet_pids=[f.pid for f in fleets], claims=False
            )
            results["claimless"] = plain
            results["claimOverClaimless"] = round(
                results["waves"][0]["podsPerSecond"] / plain["podsPerSecond"], 2
            )
        sampler.stop.set()
        watch.stop.set()
        results["peakRssMiB"] = {
            "fleet": round(sum(v for n, v in sampler.peak.items() if n.split("/")[0] == "fleet") / 2**20, 1),
            "cluster": round(sampler.peak_total / 2**20, 1),
            **{n: round(v / 2**20, 1) for n, v in sorted(sampler.peak.items())},
        }
    finally:
        if not args.keep:
            cluster.down()
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
