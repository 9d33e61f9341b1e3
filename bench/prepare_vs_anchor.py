"""Prepare/Unprepare latency, throughput, memory, startup: fakeplugin next to three Go anchors.

    hack/build-k8s.sh --only dra-test-driver,dra-anchor    # once: the anchors, cached with the binaries
    python bench/prepare_vs_anchor.py --state-dir /tmp/fpanchor          # brings up an API-only cluster
    python bench/prepare_vs_anchor.py --kubeconfig K [--claims 64] [--rounds 4] [--json out.json]

The anchors are Go kubelet plugins on the upstream `kubeletplugin` helper (built from the same
k8s.io/kubernetes version as our cluster), as most Go DRA drivers are; the helper GETs each claim before
Prepare. Every plugin runs as a standalone kubelet plugin for its own API-only Node of one real API
server (no kubelet: this script is the kubelet on their sockets):

  fakeplugin    `python -m fakeplugin serve`, --claims T4 GPUs (gpu-0...), driver gpu.nvidia.com
  go-driver     the floor: Kubernetes' DRA test driver (k8s.io/kubernetes/test/e2e/dra/test-driver,
                `kubelet-plugin --num-devices N`): a CDI JSON file per claim, no checkpoint, no fsync
  go-durable    `dra-anchor --work durable` (bench/anchor/main.go): the test driver's work plus the
                checkpoint as NVIDIA's plugin writes it (its format and the kubelet's checksums, through
                the kubelet's checkpointmanager: temp file, write, fsync, rename), PrepareStarted before
                the CDI file and PrepareCompleted after it, one write per Unprepare
  nvidia-model  `dra-anchor --work nvidia`: NVIDIA's per-call work in its order (a node-wide flock
                polled every 100 ms; under a checkpoint flock, a verified read before the work and
                before each write; its CDI spec written through a fresh CDI cache, which first reads
                every spec in the directory); docs/benchmarks.md lists it with NVIDIA's source lines

The anchors serve `device-NN` of driver test-driver.cdi.k8s.io, each in the pool of its own node,
client QPS/burst 5000/10000 (the default 50/100 would measure the rate limiter).

For each, N one-device ResourceClaims are created with status.allocation written directly (the
plugins GET them from the API server on Prepare, as in production). Then, in --rounds interleaved
rounds (the order rotates by one plugin each round), for each plugin: every claim prepared one after
the other, then unprepared one after the other (latency p50/p99 over all rounds), then prepared and
unprepared from --concurrency threads (throughput: median of the rounds; with the plugin process's CPU
time over the concurrent Prepares per second of them: 1.0 is one core busy, the most a GIL-bound
process gets). Same Python gRPC client for all, one claim per call, as the kubelet sends them.

Memory: VmRSS of each plugin process once its ResourceSlice is published and it is idle, VmHWM (the
process's peak) then, before any call, and at the end. Our plugin also starts once more for a node with
128 devices (32 T4 + 32 A100-40GB with three 2g.10gb MIG devices each: 64 GPUs, the inventory's likely
bound) for the idle RSS at 128 devices. Startup: Popen to the first GetInfo answered on the registration
socket (for ours: import and start to registrable).

The table: one column per plugin, ours / each anchor (> 1: we are slower or bigger), and issue 32's
goals, marked where this run measures them: Prepare p50 <= 1.2x the durable anchor and <= 2x the floor,
16-caller Prepare throughput >= 0.7x the durable anchor, Unprepare p50 <= 2x the floor, our RSS peak
<= 55 MiB, our startup to the first GetInfo <= 300 ms.

--py-spy DIR records our plugin (py-spy, `pip install py-spy`) during its sequential phases only and
prints where Prepare and Unprepare spend their wall time; it slows the plugin, so take latencies from a
run without it. Everything created is deleted at the end (the cluster too, when this script made it).
The table, the goals and the py-spy shares are bench/anchor_report.py's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from anchor_report import (
    DURABLE,
    GO,
    NVIDIA,
    OURS,
    Samples,
    goal_verdicts,
    profile_shares,
    py_spy,
    render,
)
from common import (
    arguments,
    cpu_seconds,
    inventory_beside,
    kubectl,
    machine,
    percentile,
    rss_kib,
    say,
    serve_argv,
    write_inventory,
)
from prepare_latency import create_claims, timed_calls

from fakeplugin._proto.dra.v1 import api_pb2, api_pb2_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.cluster import BinaryNotFound, Cluster
from fakeplugin.cluster.binaries import find as find_binary

GO_DRIVER = "test-driver.cdi.k8s.io"
# claim name prefixes and node name parts, one per plugin
SHORT = {OURS: "fp", GO: "go", DURABLE: "gd", NVIDIA: "nv"}
STARTUP_TIMEOUT = 60.0
# Our 128-device node: 64 GPUs (the inventory's likely per-node bound), half of them as 3 MIG devices each.
INVENTORY_128 = [
    {"profile": "t4", "count": 32},
    {"profile": "a100-40gb", "count": 32, "mig": [{"profile": "2g.10gb", "count": 3}]},
]


@dataclass
class Plugin:
    """One kubelet plugin process for one API-only node, driven through its sockets."""

    label: str
    driver: str
    node: str
    root: Path
    argv: list[str]
    devices: int
    proc: subprocess.Popen[bytes] | None = None
    startup_s: float = 0.0

    @property
    def dra_sock(self) -> Path:
        return self.root / "plugins" / self.driver / "dra.sock"

    @property
    def reg_sock(self) -> Path:
        return self.root / "reg" / f"{self.driver}-reg.sock"

    @property
    def log(self) -> Path:
        return self.root / "plugin.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        """Start the process; returns once GetInfo answers (startup_s: Popen to that answer)."""
        (self.root / "plugins" / self.driver).mkdir(parents=True, exist_ok=True)
        (self.root / "reg").mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log.open("w"))
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(
                    f"{self.label} exited ({self.proc.returncode}):\n{self.log.read_text()[-3000:]}"
                )
            if time.perf_counter() - t0 > STARTUP_TIMEOUT:
                raise SystemExit(
                    f"{self.label}: no GetInfo answer after {STARTUP_TIMEOUT:.0f} s; log {self.log}"
                )
            if self.reg_sock.exists() and _get_info(self.reg_sock):
                self.startup_s = time.perf_counter() - t0
                return
            time.sleep(0.002)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _get_info(sock: Path) -> bool:
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        try:
            reg_grpc.RegistrationStub(channel).GetInfo(reg_pb2.InfoRequest(), timeout=0.5)
        except grpc.RpcError:
            return False
    return True


def main() -> int:
    ap = arguments(__doc__)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--kubeconfig", help="attach to the cluster of this kubeconfig (nothing else is needed)"
    )
    where.add_argument(
        "--state-dir",
        type=Path,
        help="bring up an API-only local cluster here (fakeplugin.cluster; no root needed) and tear it down",
    )
    ap.add_argument("--claims", type=int, default=64, help="claims (and devices) per plugin (default 64)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds (default 4)")
    ap.add_argument(
        "--concurrency", type=int, default=16, help="callers in the concurrent phase (default 16)"
    )
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON to FILE")
    ap.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile our plugin's sequential phases with py-spy into DIR and print time shares",
    )
    args = ap.parse_args()
    if not 1 <= args.claims <= 64:
        ap.error("--claims must be 1..64 (our node has at most 64 GPUs)")
    try:
        test_driver, dra_anchor = find_binary("dra-test-driver"), find_binary("dra-anchor")
        find_binary("kubectl")
    except BinaryNotFound as exc:
        raise SystemExit(
            f"{exc}\nthe anchors are built with: hack/build-k8s.sh --only dra-test-driver,dra-anchor"
        ) from None
    if args.py_spy and not shutil.which("py-spy"):
        raise SystemExit("--py-spy needs py-spy in PATH: pip install py-spy")

    with cluster_kubeconfig(args.kubeconfig, args.state_dir) as kc:
        results = run(kc, test_driver, dra_anchor, args)
    results["goals"] = goal_verdicts(results)
    print(render(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        say(f"results written to {args.json}")
    return 0


@contextmanager
def cluster_kubeconfig(kubeconfig: str | None, state_dir: Path | None) -> Iterator[str]:
    """The given kubeconfig, or that of an API-only cluster started (and stopped) here."""
    if kubeconfig:
        yield kubeconfig
        return
    assert state_dir is not None
    inventory = inventory_beside(state_dir, [{"name": "bench-worker", "kubelet": False}])
    say(f"bringing up an API-only cluster in {state_dir} (etcd, apiserver, scheduler, KCM)")
    cluster = Cluster.up(inventory, state_dir, plugin=False)
    try:
        yield str(cluster.kubeconfig)
    finally:
        say("stopping the cluster")
        cluster.down(purge=True)


def run(kc: str, test_driver: Path, dra_anchor: Path, args: argparse.Namespace) -> dict:
    tag = f"{os.getpid()}"
    namespace = f"fakeplugin-anchor-{tag}"
    tmp = Path(tempfile.mkdtemp(prefix="fpanchor-", dir="/tmp"))  # short: unix socket paths
    ours = our_plugin(kc, tmp / "ours", f"bench-fp-{tag}", [{"profile": "t4", "count": args.claims}])
    anchors = [
        go_plugin(kc, test_driver, tmp / SHORT[GO], f"bench-{SHORT[GO]}-{tag}", args.claims),
        *(
            anchor_plugin(kc, dra_anchor, a, tmp / SHORT[a], f"bench-{SHORT[a]}-{tag}", args.claims)
            for a in (DURABLE, NVIDIA)
        ),
    ]
    big = our_plugin(kc, tmp / "ours128", f"bench-fp128-{tag}", INVENTORY_128)
    plugins = (ours, *anchors)
    nodes = [p.node for p in (*plugins, big)]
    kubectl(kc, "create", "namespace", namespace)
    kubectl(
        kc,
        "create",
        "-f",
        "-",
        stdin=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}} for n in nodes],
            }
        ),
    )
    results: dict = {
        "machine": machine(),
        "claims": args.claims,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
    }
    try:
        say(f"fakeplugin for {big.node}: 128 devices (idle RSS, startup)")
        big.start()
        wait_published(kc, big)
        results["fakeplugin_128"] = {
            "startup_ms": round(big.startup_s * 1000, 1),
            "rss_idle_kib": settle_rss(big),
        }
        big.stop()
        for p in plugins:
            say(f"{p.label} for {p.node}: {p.devices} devices")
            p.start()
            wait_published(kc, p)
            results.setdefault(p.label, {})["startup_ms"] = round(p.startup_s * 1000, 1)
            results[p.label]["rss_idle_kib"] = settle_rss(p)
            results[p.label]["rss_peak_idle_kib"] = rss_kib(p.pid)[1]  # startup's peak, before any call
        claims = {
            OURS: create_claims(
                kc,
                [f"gpu-{i}" for i in range(args.claims)],
                namespace=namespace,
                driver=ours.driver,
                pool=ours.node,
                prefix=SHORT[OURS],
            )
        }
        for a in anchors:
            claims[a.label] = create_claims(
                kc,
                [f"device-{i:02d}" for i in range(args.claims)],
                namespace=namespace,
                driver=a.driver,
                pool=a.node,
                prefix=SHORT[a.label],
            )
        say(f"{len(plugins) * args.claims} claims created and allocated in {namespace}")
        samples = {p.label: Samples() for p in plugins}
        channels = {p.label: grpc.insecure_channel(f"unix:{p.dra_sock}") for p in plugins}
        for channel in channels.values():
            grpc.channel_ready_future(channel).result(timeout=10)
        for r in range(args.rounds):
            for p in rotated(plugins, r):
                say(f"round {r + 1}/{args.rounds}: {p.label}")
                stub = api_pb2_grpc.DRAPluginStub(channels[p.label])
                profile = args.py_spy / f"round{r + 1}.txt" if args.py_spy and p is ours else None
                one_round(stub, claims[p.label], args.concurrency, samples[p.label], p.pid, profile)
        for p in plugins:
            results[p.label] |= summary(samples[p.label], p)
        if args.py_spy:
            results["profile"] = profile_shares(sorted(args.py_spy.glob("round*.txt")), samples[OURS])
    finally:
        for p in (*plugins, big):
            p.stop()
        kubectl(kc, "delete", "namespace", namespace, "--wait=false")
        kubectl(kc, "delete", "node", *nodes, "--wait=false")
        say(f"plugin logs and dirs left in {tmp}")
    return results


def rotated(plugins: tuple[Plugin, ...], r: int) -> tuple[Plugin, ...]:
    """Round r's order: each round starts one plugin later, so each takes each place in turn."""
    k = r % len(plugins)
    return plugins[k:] + plugins[:k]


def our_plugin(kc: str, root: Path, node: str, gpus: list[dict]) -> Plugin:
    """`fakeplugin serve` for `node` with an inventory of these GPU entries."""
    root.mkdir(parents=True)
    inventory = write_inventory(root / "inventory.yaml", [{"name": node, "gpus": gpus}])
    argv = serve_argv(inventory, node, kc, root)
    devices = sum(g["count"] * sum(m["count"] for m in g.get("mig", [{"count": 1}])) for g in gpus)
    return Plugin(OURS, "gpu.nvidia.com", node, root, argv, devices)


def anchor_argv(binary: Path, kc: str, root: Path, node: str, devices: int, command: list[str]) -> list[str]:
    """The flags both Go binaries take (the test driver's), for `node`'s plugin under `root`: the client's,
    then `command` (the test driver's `kubelet-plugin`; dra-anchor has none), then the plugin's."""
    client = ["--kubeconfig", kc, "--kube-api-qps", "5000", "--kube-api-burst", "10000"]
    plugin = ["--node-name", node, "--num-devices", str(devices), "--datadir", str(root / "plugins")]
    paths = ["--plugin-registration-path", str(root / "reg"), "--cdi-dir", str(root / "cdi")]
    return [str(binary), *client, *command, *plugin, *paths]


def go_plugin(kc: str, binary: Path, root: Path, node: str, devices: int) -> Plugin:
    """The Go test driver as a standalone kubelet plugin for `node` (its `kubelet-plugin` command,
    docs/benchmarks.md): the floor."""
    argv = anchor_argv(binary, kc, root, node, devices, ["kubelet-plugin"])
    return Plugin(GO, GO_DRIVER, node, root, argv, devices)


def anchor_plugin(kc: str, binary: Path, label: str, root: Path, node: str, devices: int) -> Plugin:
    """bench/anchor/main.go for `node`: --work durable (go-durable) or nvidia (nvidia-model)."""
    work = {DURABLE: "durable", NVIDIA: "nvidia"}[label]
    argv = [*anchor_argv(binary, kc, root, node, devices, []), "--work", work]
    return Plugin(label, GO_DRIVER, node, root, argv, devices)


def wait_published(kc: str, p: Plugin, timeout: float = 60.0) -> None:
    """Until the node's ResourceSlices of the plugin's driver hold all its devices."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        slices = json.loads(
            kubectl(kc, "get", "resourceslices", f"--field-selector=spec.nodeName={p.node}", "-o", "json")
        )["items"]
        if (
            sum(len(s["spec"].get("devices", [])) for s in slices if s["spec"]["driver"] == p.driver)
            == p.devices
        ):
            return
        time.sleep(0.2)
    raise SystemExit(
        f"{p.label}: {p.devices} devices not published for {p.node} after {timeout:.0f} s; log {p.log}"
    )


def settle_rss(p: Plugin, seconds: float = 2.0) -> int:
    """VmRSS (KiB) once the process had `seconds` to finish what publishing started."""
    time.sleep(seconds)
    return rss_kib(p.pid)[0]


def one_round(
    stub: api_pb2_grpc.DRAPluginStub,
    claims: list[api_pb2.Claim],
    concurrency: int,
    into: Samples,
    pid: int,
    profile: Path | None,
) -> None:
    """Sequential Prepare, sequential Unprepare, then both from `concurrency` threads."""
    with py_spy(pid, profile):
        for kind in ("prepare", "unprepare"):
            into.sequential[kind] += timed_calls(stub, claims, kind, 1)[0]
    for kind in ("prepare", "unprepare"):
        cpu = cpu_seconds(pid)
        latencies, wall = timed_calls(stub, claims, kind, concurrency)
        into.concurrent[kind].append(len(claims) / wall)
        if kind == "prepare":
            into.concurrent_latency += latencies
            into.concurrent_cores.append((cpu_seconds(pid) - cpu) / wall)


def summary(s: Samples, p: Plugin) -> dict:
    """p50/p99 in ms, throughputs per second, RSS peak (KiB)."""

    def ms(values: list[float], q: float) -> float:
        return round(percentile([v * 1000 for v in values], q), 2)

    return {
        "prepare_p50_ms": ms(s.sequential["prepare"], 50),
        "prepare_p99_ms": ms(s.sequential["prepare"], 99),
        "unprepare_p50_ms": ms(s.sequential["unprepare"], 50),
        "unprepare_p99_ms": ms(s.sequential["unprepare"], 99),
        "concurrent_prepare_per_s": round(statistics.median(s.concurrent["prepare"]), 1),
        "concurrent_unprepare_per_s": round(statistics.median(s.concurrent["unprepare"]), 1),
        "concurrent_prepare_p50_ms": ms(s.concurrent_latency, 50),
        "concurrent_prepare_p99_ms": ms(s.concurrent_latency, 99),
        "concurrent_prepare_cores": round(statistics.median(s.concurrent_cores), 2),
        "rss_peak_kib": rss_kib(p.pid)[1],
    }


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
