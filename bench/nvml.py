"""NVML in the container, measured (issue 44): the mock library's size, nvmlInit plus a full enumeration of
8 GPUs with MIG, and the Prepare time the NVML description adds per claim, side by side in one run.

    python bench/nvml.py --state-dir /tmp/fpnvml [--claims 64] [--rounds 4] [--json out.json]
    python bench/nvml.py --kubeconfig K [...]      # attach to a running cluster's API server
    python bench/nvml.py --no-prepare              # the library and the enumeration only: no cluster

Library: fakeplugin/nvml built with the system's compiler (fakeplugin.nvml.build, a temp cache), its size
and exported functions.

Enumeration: a container of 8 A100-40GB GPUs, each in MIG mode with seven 1g.5gb devices (56 MIG devices),
its description as Prepare writes it; bench/nvml_enum.c (compiled here, linked to libnvidia-ml.so.1 by
name) times its first nvmlInit_v2 (which reads the description) and then a full enumeration, the calls a
device plugin or go-nvlib makes (count; per GPU handle, name, UUID, PCI info, memory, MIG mode, max MIG
count; per MIG device handle, UUID, name, memory), --enumerations times; the median of --processes such
processes. Twice: with each device's live state beside its description (every device call reads it, as
in a container of a plugin run with the library) and without.

Prepare: two `fakeplugin serve` processes for two API-only Nodes of --claims T4 GPUs each, one with
--nvml-library (its CDI specs mount the library and each device's description and live directory; its
live-state writer runs) and one without; --claims one-GPU claims each, allocated by writing
status.allocation. In --rounds rounds (which plugin goes first alternates), each plugin prepares every
claim one after the other over its socket, then unprepares them; p50/p99 over all rounds, and the NVML
plugin's added p50 per claim in ms and in % of the plain one (issue 44's goal: <= 10 %).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import yaml
from common import arguments, kubectl, machine, percentile, say, serve_argv, write_inventory
from prepare_latency import create_claims, timed_calls
from prepare_vs_anchor import cluster_kubeconfig

from fakeplugin._proto.dra.v1 import api_pb2_grpc
from fakeplugin.drivers.gpu import node_devices, nvmldata
from fakeplugin.inventory import parse_inventory
from fakeplugin.nvml import build
from fakeplugin.telemetry.nvmllive import node_live

HERE = Path(__file__).parent
CONTAINER = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: node
  gpus:
  - profile: a100-40gb
    count: 8
    mig:
    - {profile: 1g.5gb, count: 7}
"""
GOAL_PERCENT = 10


def main() -> int:
    ap = arguments(__doc__)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--kubeconfig", help="attach to the cluster of this kubeconfig")
    where.add_argument("--state-dir", type=Path, help="bring up an API-only local cluster here, then down")
    where.add_argument("--no-prepare", action="store_true", help="the library and enumeration only")
    ap.add_argument("--claims", type=int, default=64, help="claims (and T4 GPUs) per plugin (default 64)")
    ap.add_argument("--rounds", type=int, default=4, help="Prepare rounds (default 4)")
    ap.add_argument("--processes", type=int, default=20, help="enumerating processes (default 20)")
    ap.add_argument("--enumerations", type=int, default=200, help="enumerations per process (default 200)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON to FILE")
    args = ap.parse_args()
    if not 1 <= args.claims <= 128:
        ap.error("--claims must be 1..128 (the inventory's most GPUs per node)")
    tmp = Path(tempfile.mkdtemp(prefix="fpnvml-", dir="/tmp"))  # short: unix socket paths
    library = build.build(tmp / "cache")
    results: dict[str, Any] = {"machine": machine(), "library": library_facts(library)}
    results["enumeration"] = enumeration(library, tmp, args.processes, args.enumerations)
    if not args.no_prepare:
        with cluster_kubeconfig(args.kubeconfig, args.state_dir) as kc:
            results["prepare"] = prepare(kc, library, tmp, args.claims, args.rounds)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        say(f"results written to {args.json}")
    return 0


def library_facts(library: Path) -> dict[str, Any]:
    return {
        "path": str(library),
        "bytes": library.stat().st_size,
        "exported_functions": len(build.symbols()),
        "emulated_functions": len(build.defined()),
        "compiler": build.compiler(),
    }


def enumeration(library: Path, tmp: Path, processes: int, rounds: int) -> dict[str, Any]:
    inv = parse_inventory(yaml.safe_load(CONTAINER), "container.yaml")
    devices = {d.name: d for d in node_devices(inv, "node", {}) if d.mig is not None}
    consumer = tmp / "nvml_enum"
    subprocess.run(
        [
            "cc",
            "-O2",
            "-o",
            str(consumer),
            str(HERE / "nvml_enum.c"),
            f"-L{library.parent}",
            "-l:libnvidia-ml.so.1",
        ],
        check=True,
    )
    out: dict[str, Any] = {"gpus": 8, "mig_devices": len(devices)}
    for label, live in (("with_live_state", True), ("description_only", False)):
        directory = tmp / f"container-{label}"
        directory.mkdir()
        texts = node_live(devices, {}, {}) if live else {}
        for name, device in devices.items():
            (directory / nvmldata.file_name(name)).write_text(
                nvmldata.render_device(device), encoding="utf-8"
            )
            if live:
                (directory / f"{name}.live").mkdir()
                (directory / f"{name}.live" / nvmldata.LIVE_STATE).write_text(texts[name], encoding="utf-8")
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(library.parent),
            "FAKEPLUGIN_NVML_DESCRIPTION": str(directory),
        }
        runs = [
            json.loads(
                subprocess.run(
                    [str(consumer), str(rounds)], env=env, capture_output=True, text=True, check=True
                ).stdout
            )
            for _ in range(processes)
        ]
        enumerate_us = statistics.median(r["enumeration_us"] for r in runs)
        calls = runs[0]["calls"]
        out[label] = {
            "init_us_p50": round(statistics.median(r["init_us"] for r in runs), 1),
            "enumeration_us_p50": round(enumerate_us, 1),
            "calls": calls,
            "us_per_call": round(enumerate_us / calls, 3),
        }
        say(f"enumeration ({label}): {out[label]}")
    return out


@contextmanager
def plugin(kc: str, root: Path, node: str, claims: int, library: Path | None) -> Iterator[Path]:
    """`fakeplugin serve` for `node` (with `library`: --nvml-library); yields its DRA socket."""
    inventory = write_inventory(
        root / "inventory.yaml", [{"name": node, "gpus": [{"profile": "t4", "count": claims}]}]
    )
    kubectl(
        kc,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    )
    argv = serve_argv(inventory, node, kc, root) + ([f"--nvml-library={library}"] if library else [])
    log = root / "plugin.log"
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        sock = root / "plugins" / "gpu.nvidia.com" / "dra.sock"
        while not sock.exists():
            if process.poll() is not None:
                raise SystemExit(f"plugin {node} exited: {log.read_text()}")
            time.sleep(0.1)
        yield sock
    finally:
        process.terminate()
        process.wait(10)
        kubectl(kc, "delete", "node", node, "--wait=false")


def prepare(kc: str, library: Path, tmp: Path, claims: int, rounds: int) -> dict[str, Any]:
    tag = os.getpid()
    namespace = f"fakeplugin-nvml-{tag}"
    kubectl(kc, "create", "namespace", namespace)
    latencies: dict[str, dict[str, list[float]]] = {}
    try:
        with (
            plugin(kc, tmp / "plain", f"bench-plain-{tag}", claims, None) as plain,
            plugin(kc, tmp / "nvml", f"bench-nvml-{tag}", claims, library) as with_nvml,
        ):
            sockets = {"without_nvml": plain, "with_nvml": with_nvml}
            nodes = {"without_nvml": f"bench-plain-{tag}", "with_nvml": f"bench-nvml-{tag}"}
            made = {
                label: create_claims(
                    kc,
                    [f"gpu-{i}" for i in range(claims)],
                    namespace=namespace,
                    pool=nodes[label],
                    prefix=label.replace("_", "-"),
                )
                for label in sockets
            }
            stubs = {
                label: api_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix:{s}"))
                for label, s in sockets.items()
            }
            order = list(sockets)
            for r in range(rounds):
                for label in order if r % 2 == 0 else reversed(order):
                    for kind in ("prepare", "unprepare"):
                        times, _ = timed_calls(stubs[label], made[label], kind, 1)
                        latencies.setdefault(label, {}).setdefault(kind, []).extend(t * 1000 for t in times)
                say(f"round {r + 1}/{rounds} done")
    finally:
        kubectl(kc, "delete", "namespace", namespace, "--wait=false")
    out: dict[str, Any] = {"claims": claims, "rounds": rounds}
    for label, kinds in latencies.items():
        out[label] = {
            kind: {"p50_ms": round(statistics.median(ms), 3), "p99_ms": round(percentile(ms, 99), 3)}
            for kind, ms in kinds.items()
        }
    plain_p50 = out["without_nvml"]["prepare"]["p50_ms"]
    added = out["with_nvml"]["prepare"]["p50_ms"] - plain_p50
    out["added_prepare_p50_ms"] = round(added, 3)
    out["added_prepare_p50_percent"] = round(100 * added / plain_p50, 1)
    out["goal"] = f"<= {GOAL_PERCENT} %: {'met' if added <= plain_p50 * GOAL_PERCENT / 100 else 'missed'}"
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
