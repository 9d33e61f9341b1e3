"""What each import (and the first API calls) costs `fakeplugin serve` in resident memory and time.

    python bench/import_cost.py                      # imports only
    python bench/import_cost.py --kubeconfig K --node N   # plus fakeplugin.kube's first calls

Each line is measured in a fresh interpreter (`-X importtime` style, but RSS): "alone" imports just
that module; "cumulative" imports the modules in the order given, so a line shows what it adds on top
of the ones above it (shared dependencies are charged to the first one that pulls them in). RSS is
VmRSS from /proc/self/status, in MiB; time is wall time of the import.

With --kubeconfig the cumulative run goes on with what serve does first: build the API client, GET
the node --node, list its ResourceSlices (each twice: the first call of a kind builds what it needs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

# serve's imports, heaviest dependencies first, then ours in the order `fakeplugin serve` loads them.
MODULES = [
    "grpc",
    "google.protobuf",
    "yaml",
    "prometheus_client",
    "urllib3",
    "pydantic",
    "kubernetes",
    "fakeplugin.kube",
    "fakeplugin.commands.serve",
    "fakeplugin.drivers.gpu.prepare.preparer",
    "fakeplugin.drivers.gpu.publish.node",
    "fakeplugin.runtime.publisher",
    "fakeplugin.drivers.gpu.publish.slices",
    "fakeplugin.server",
]

PROBE = r"""
import importlib, json, sys, time
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
out = [("interpreter", rss(), 0.0)]
for name in json.loads(sys.argv[1]):
    t0, r0 = time.perf_counter(), rss()
    importlib.import_module(name)
    out.append((name, rss() - r0, (time.perf_counter() - t0) * 1000))
kubeconfig, node = sys.argv[2], sys.argv[3]
def step(label, fn):
    t0, r0 = time.perf_counter(), rss()
    result = fn()
    out.append((label, rss() - r0, (time.perf_counter() - t0) * 1000))
    return result
if kubeconfig:
    from fakeplugin.kube import Kube, new_api_client
    kube = step("Kube(new_api_client(kubeconfig))", lambda: Kube(new_api_client(kubeconfig)))
    step("first get_node", lambda: kube.get_node(node))
    step("second get_node", lambda: kube.get_node(node))
    step("first list_slices", lambda: kube.list_slices(driver="gpu.nvidia.com", node_name=node))
    step("second list_slices", lambda: kube.list_slices(driver="gpu.nvidia.com", node_name=node))
out.append(("total", rss(), 0.0))
print(json.dumps(out))
"""


def probe(modules: list[str], kubeconfig: str = "", node: str = "") -> list[tuple[str, float, float]]:
    """Run PROBE in a fresh interpreter; (label, RSS delta MiB, ms) per step."""
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(modules), kubeconfig, node],
        capture_output=True,
        text=True,
        check=True,
    )
    return [tuple(row) for row in json.loads(result.stdout)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", default="", help="also measure fakeplugin.kube's first calls against it")
    ap.add_argument("--node", default="", help="an existing Node to GET (with --kubeconfig)")
    args = ap.parse_args()
    if args.kubeconfig and not args.node:
        ap.error("--kubeconfig needs --node")
    print(f"Python {sys.version.split()[0]}; MiB of VmRSS, ms of wall time\n")
    print("| module | alone: RSS | alone: ms | cumulative: +RSS | cumulative: ms |")
    print("| --- | --- | --- | --- | --- |")
    cumulative = probe(MODULES, args.kubeconfig, args.node)
    base = cumulative[0][1]
    print(f"| (bare interpreter) | {base:.1f} | | {base:.1f} | |")
    for label, delta, ms in cumulative[1:-1]:
        if label in MODULES:
            _, alone_delta, alone_ms = probe([label])[1]
            print(f"| {label} | +{alone_delta:.1f} | {alone_ms:.0f} | +{delta:.1f} | {ms:.0f} |")
        else:
            print(f"| {label} | | | +{delta:.1f} | {ms:.0f} |")
    print(f"| **total** | | | {cumulative[-1][1]:.1f} | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
