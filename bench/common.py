"""What the benchmarks share: their command line, progress and results, statistics, what /proc says of a
process, waiting, inventories, kubectl and the `fakeplugin serve` they start.

The scripts run as `python bench/<name>.py`, so this folder is on their import path (`from common import
...`); tests/test_bench_common.py covers these helpers in the fast tier.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from fakeplugin.cluster import Cluster
    from fakeplugin.kube import Kube

TICKS = os.sysconf("SC_CLK_TCK")


def arguments(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its module docstring as the description, laid out as written."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def cluster_arguments(doc: str, state_dir: str) -> argparse.ArgumentParser:
    """The parser of a benchmark on a local cluster it starts in --state-dir: --json, --keep."""
    parser = arguments(doc)
    parser.add_argument(
        "--state-dir", type=Path, default=Path(state_dir), help=f"the local cluster's (default {state_dir})"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running")
    return parser


def exit_on_sigterm() -> None:
    """SIGTERM (e.g. `timeout`) ends the run through the callers' `finally`: the cluster goes down."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def say(message: str) -> None:
    """Progress on stderr (stdout carries the results)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def machine() -> str:
    """The machine the numbers come from: cores, CPU model, memory, Python."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.machine(),
    )
    mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    return f"{os.cpu_count()} cores ({cpu}), {mem:.0f} GiB, Python {platform.python_version()}"


def report(results: dict[str, Any], json_path: Path | None) -> None:
    """The results on stdout, and in `json_path` too when given (every bench's --json)."""
    text = json.dumps(results, indent=2)
    print(text)
    if json_path:
        json_path.write_text(text + "\n")


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank p-th percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def median_max(values: Sequence[float], digits: int = 2) -> dict[str, float]:
    return {"median": round(statistics.median(values), digits), "max": round(max(values), digits)}


def _stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from its 3rd field (state) on: the 2nd, the command, may hold spaces."""
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of `pid` so far (all its threads)."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def start_epoch(pid: int) -> float:
    """When `pid` started, in seconds since the epoch (boot time + its starttime)."""
    stat = Path("/proc/stat").read_text().splitlines()
    boot = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    return boot + int(_stat_fields(pid)[19]) / TICKS


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of `pid` in KiB: resident now, and the peak since the process started."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def cpu_by_process(cluster: Cluster) -> dict[str, float]:
    """CPU seconds so far of each running process of a local cluster."""
    return {p.name: cpu_seconds(p.pid) for p in cluster.status() if p.running}


def wait_until(
    what: str, done: Callable[[], bool], timeout: float, progress: Callable[[], str] | None = None
) -> float:
    """Seconds until `done()`, asked every half second; SystemExit naming `what` after `timeout`;
    `progress()` said every 10 s."""
    started = time.monotonic()
    last_said = started
    while not done():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        if progress and time.monotonic() - last_said > 10:
            say(f"  ... {progress()}")
            last_said = time.monotonic()
        time.sleep(0.5)
    return time.monotonic() - started


def inventory(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """An inventory of these node entries, of the seed lab's driver."""
    return {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": nodes}


def write_inventory(path: Path, nodes: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(inventory(nodes), sort_keys=False))
    return path


def inventory_beside(state_dir: Path, nodes: list[dict[str, Any]]) -> Path:
    """The inventory of a local cluster to start in `state_dir`, written beside it (`<dir>-inventory.yaml`:
    `cluster up` owns what is inside)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    return write_inventory(state_dir.parent / f"{state_dir.name}-inventory.yaml", nodes)


def create(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    """`kubectl create` of the objects, as one List."""
    if objects:
        items = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
        cluster.kubectl("create", "-f", "-", input=items, timeout=300)


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    """kubectl's stdout (the local cluster's binary); a failure raises CalledProcessError."""
    from fakeplugin.cluster.binaries import find

    return subprocess.run(
        [str(find("kubectl")), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def serve_argv(inventory_path: Path, node: str, kubeconfig: str, root: Path) -> list[str]:
    """`fakeplugin serve` for `node` as a standalone kubelet plugin: its registration dir root/reg, its
    plugins dir root/plugins (the DRA socket: plugins/<driver>/dra.sock), CDI specs in root/cdi."""
    return [
        sys.executable,
        "-m",
        "fakeplugin",
        "serve",
        "--inventory",
        str(inventory_path),
        "--node-name",
        node,
        "--kubeconfig",
        kubeconfig,
        "--kubelet-registrar-directory-path",
        str(root / "reg"),
        "--kubelet-plugins-directory-path",
        str(root / "plugins"),
        "--cdi-root",
        str(root / "cdi"),
    ]


NAMESPACE = "bench"  # of the workloads of the fleet and Kueue benchmarks


class PodWatch(threading.Thread):
    """Phases of the pods of `namespace`, from one watch: counting Running pods by listing them every
    half second would itself load the API server we measure."""

    def __init__(self, kube: Kube, namespace: str = NAMESPACE) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.path = f"/api/v1/namespaces/{namespace}/pods"
        self.phase: dict[str, str] = {}
        self.stop = threading.Event()

    def running(self) -> int:
        return sum(1 for p in list(self.phase.values()) if p == "Running")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                pods, version = self.kube.list(self.path)
                self.phase = {p["metadata"]["uid"]: p.get("status", {}).get("phase", "") for p in pods}
                for event in self.kube.watch(self.path, resource_version=version, timeout_seconds=60):
                    obj = event["object"]
                    if event["type"] == "DELETED":
                        self.phase.pop(obj["metadata"]["uid"], None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        self.phase[obj["metadata"]["uid"]] = obj.get("status", {}).get("phase", "")
            except Exception:  # the watch broke (e.g. the cluster is going down): list again, or stop
                self.stop.wait(1.0)
