"""NodePrepareResources latency and throughput through the real unix socket, against a real API server.

    python bench/prepare_latency.py --kubeconfig KUBECONFIG [--claims 128] [--concurrency 16]

What it does: registers an API-only Node `bench-node` with one inventory entry of --claims GPUs,
starts `fakeplugin serve` for it (temp dirs, our real gRPC server), creates --claims ResourceClaims
of one GPU each with status.allocation written directly (no scheduler needed: the plugin reads the
claim from the API server exactly as in production), then calls NodePrepareResources and
NodeUnprepareResources over the socket: first one claim at a time, then from --concurrency threads.
Prints p50/p99 latency, throughput and the plugin's peak RSS; deletes what it created.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from common import arguments, kubectl, percentile, rss_kib, serve_argv, write_inventory

from fakeplugin._proto.dra.v1 import api_pb2, api_pb2_grpc

NODE = "bench-node"
NS = f"fakeplugin-bench-{os.getpid()}"


def main() -> int:
    ap = arguments(__doc__)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--claims", type=int, default=128, help="claims (and GPUs) per round (max 128)")
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    kc = args.kubeconfig

    tmp = Path(tempfile.mkdtemp(prefix="fpbench-"))
    node = {"name": NODE, "gpus": [{"profile": "t4", "count": args.claims}]}
    inventory = write_inventory(tmp / "inventory.yaml", [node])
    kubectl(
        kc,
        "apply",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}),
    )
    kubectl(kc, "create", "namespace", NS)
    plugin = subprocess.Popen(
        serve_argv(inventory, NODE, kc, tmp),
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "plugin.log").open("w"),  # the child owns the file for its lifetime
    )
    try:
        sock = tmp / "plugins" / "gpu.nvidia.com" / "dra.sock"
        while not sock.exists():
            if plugin.poll() is not None:
                raise SystemExit(f"plugin exited: {(tmp / 'plugin.log').read_text()}")
            time.sleep(0.1)
        claims = create_claims(kc, [f"gpu-{i}" for i in range(args.claims)])
        rss_idle = rss_kib(plugin.pid)[0]
        stub = api_pb2_grpc.DRAPluginStub(grpc.insecure_channel(f"unix:{sock}"))
        report = {"claims": args.claims, "rss_idle_kib": rss_idle}
        for label, workers in (("sequential", 1), (f"concurrent-{args.concurrency}", args.concurrency)):
            report[label] = run_round(stub, claims, workers)
        report["rss_peak_kib"] = rss_kib(plugin.pid)[1]
        print(json.dumps(report, indent=2))
    finally:
        plugin.terminate()
        plugin.wait(10)
        kubectl(kc, "delete", "namespace", NS, "--wait=false")
        kubectl(kc, "delete", "node", NODE, "--wait=false")
    return 0


def create_claims(
    kc: str,
    devices: list[str],
    *,
    namespace: str = NS,
    driver: str = "gpu.nvidia.com",
    pool: str = NODE,
    prefix: str = "bench",
) -> list[api_pb2.Claim]:
    """One ResourceClaim per device (`<prefix>-<i>`), allocated to it by writing status.allocation."""
    objs = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"{prefix}-{i}", "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver}}]}},
        }
        for i in range(len(devices))
    ]
    kubectl(kc, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))
    by_name = {
        o["metadata"]["name"]: o
        for o in json.loads(kubectl(kc, "get", "resourceclaims", "-n", namespace, "-o", "json"))["items"]
    }
    items = [by_name[f"{prefix}-{i}"] for i in range(len(devices))]
    for obj, device in zip(items, devices, strict=True):
        obj["status"] = {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]}
            }
        }
    kubectl(
        kc,
        "replace",
        "--subresource=status",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )
    return [
        api_pb2.Claim(namespace=namespace, name=o["metadata"]["name"], uid=o["metadata"]["uid"])
        for o in items
    ]


def timed_calls(
    stub: api_pb2_grpc.DRAPluginStub, claims: list[api_pb2.Claim], kind: str, workers: int
) -> tuple[list[float], float]:
    """Call `kind` ("prepare" or "unprepare") once per claim from `workers` threads, one claim per call.

    Returns every call's latency and the wall time of the whole batch, in seconds; a claim's error raises.
    """
    latencies: list[float] = []
    lock = threading.Lock()

    def call(claim: api_pb2.Claim) -> None:
        t0 = time.perf_counter()
        if kind == "prepare":
            resp = stub.NodePrepareResources(api_pb2.NodePrepareResourcesRequest(claims=[claim]), timeout=60)
        else:
            resp = stub.NodeUnprepareResources(
                api_pb2.NodeUnprepareResourcesRequest(claims=[claim]), timeout=60
            )
        elapsed = time.perf_counter() - t0
        if resp.claims[claim.uid].error:
            raise RuntimeError(f"{kind} {claim.name}: {resp.claims[claim.uid].error}")
        with lock:
            latencies.append(elapsed)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(call, claims))
    return latencies, time.perf_counter() - t0


def run_round(stub: api_pb2_grpc.DRAPluginStub, claims: list[api_pb2.Claim], workers: int) -> dict:
    out = {}
    for kind in ("prepare", "unprepare"):
        latencies, wall = timed_calls(stub, claims, kind, workers)
        ms = [v * 1000 for v in latencies]
        out[kind] = {
            "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(percentile(ms, 99), 2),
            "throughput_per_s": round(len(ms) / wall, 1),
        }
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
