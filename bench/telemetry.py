"""Telemetry at fleet scale: the fleet's dcgm-exporter endpoint, beside the same cluster's Node list.

    python bench/telemetry.py                        # 1000 nodes x 8 H200, 200 claim pods, 10 scrapes
    python bench/telemetry.py --nodes 100 --pods 20  # a quick look
    python bench/telemetry.py --json out.json --keep

Brings up a local cluster (`Cluster.up(telemetry=True)`: the fleet serves `/metrics` on loopback, nothing
scrapes it yet) of --nodes simulated nodes with --gpus H200 each. Measured, in one run:

  idle       the fleet's RSS once every slice is published and --pods claim pods run (one GPU each:
             their series carry pod, namespace, container and dra_* labels), before any scrape
  scrapes    --scrapes GETs of /metrics one after another, with Accept-Encoding: gzip as Prometheus sends
             it, each SPACING s after the last (past the shared render's second: every one renders): the
             time to the last byte, the bytes on the wire, the text's size and series (lines) once
             decompressed, and that the pods' GPUs carry their pod label
  plain      one GET without gzip: the text, decompressed by the endpoint as it sends it
  crowd      --crowd scrapers at once: how many got 200 and 503, and the slowest answer
  memory     the fleet's RSS after the scrapes, and its peak, sampled every 0.1 s from before the first
             scrape: extra = peak - idle
  anchor     as many GETs of the API server's Node list (/api/v1/nodes as JSON, decoded: what
             kube-state-metrics reads to export its kube_node_* series), timed the same way, one after
             another in the same run

Everything is deleted at the end unless --keep.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import http.client
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from common import (
    NAMESPACE,
    PodWatch,
    cluster_arguments,
    create,
    exit_on_sigterm,
    machine,
    median_max,
    report,
    rss_kib,
    say,
    wait_until,
)
from fleet import simulated_inventory, workload

from fakeplugin.cluster import Cluster
from fakeplugin.fleet.api import FleetKube
from fakeplugin.kube import NODES, SLICES, new_api_client

SPACING = 1.5  # s between scrapes: the endpoint shares one render per second


class Peak(threading.Thread):
    """The RSS of `pid`, every 0.1 s; keeps the peak (KiB)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.kib = rss_kib(pid)[0]

    def run(self) -> None:
        while not self.stop.wait(0.1):
            self.kib = max(self.kib, rss_kib(self.pid)[0])


def scrape(url: str, gzipped: bool = True) -> tuple[int, float, bytes, bytes]:
    """(status, seconds to the last byte, the body as sent, the text) of one GET of `url`."""
    parts = urlsplit(url)
    started = time.perf_counter()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.request("GET", parts.path, headers={"Accept-Encoding": "gzip"} if gzipped else {})
        response = conn.getresponse()
        body = response.read()
        seconds = time.perf_counter() - started
        encoded = response.getheader("Content-Encoding") == "gzip"
        return response.status, seconds, body, gzip.decompress(body) if encoded else body
    finally:
        conn.close()


def crowd(url: str, clients: int) -> dict[str, Any]:
    """`clients` scrapes at once."""
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda _: scrape(url)[:2], range(clients)))
    return {
        "clients": clients,
        "ok": sum(1 for status, _ in answers if status == 200),
        "busy": sum(1 for status, _ in answers if status == 503),
        "slowestSeconds": round(max(s for _, s in answers), 2),
    }


def main() -> int:
    parser = cluster_arguments(__doc__, "/tmp/fakeplugin-bench-telemetry")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8, help="H200 GPUs per node")
    parser.add_argument("--pods", type=int, default=200, help="claim pods running while scraped")
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--crowd", type=int, default=100, help="concurrent scrapers, once")
    args = parser.parse_args()
    exit_on_sigterm()

    inventory = simulated_inventory(args.state_dir, "h200", args.nodes, args.gpus)
    say(f"cluster up: {args.nodes} simulated nodes x {args.gpus} H200, the fleet's telemetry on")
    cluster = Cluster.up(inventory, args.state_dir, telemetry=True, fleet_shards=1)
    results: dict[str, Any] = {"machine": machine(), "nodes": args.nodes, "gpusPerNode": args.gpus}
    try:
        kube = FleetKube(new_api_client(str(cluster.kubeconfig)))
        (fleet,) = [p for p in cluster.status() if p.name == "fleet"]
        url = cluster.telemetry_urls["fleet"]
        want = args.nodes
        wait_until(
            f"{want} slices",
            lambda: kube.count(SLICES) >= want,
            1800,
            lambda: f"{kube.count(SLICES)} slices",
        )
        if args.pods:
            cluster.kubectl("create", "namespace", NAMESPACE)
            watch = PodWatch(kube)
            watch.start()
            create(cluster, workload(args.pods, "gpu-pods", claims=True))
            wait_until(
                f"{args.pods} claim pods Running",
                lambda: watch.running() >= args.pods,
                1800,
                lambda: f"{watch.running()} Running",
            )
            watch.stop.set()
        time.sleep(5)
        idle = rss_kib(fleet.pid)[0]
        results["fleetIdleRssMiB"] = round(idle / 1024, 1)
        say(f"  fleet RSS before any scrape: {idle / 1024:.1f} MiB; scraping {url}")

        peak = Peak(fleet.pid)
        peak.start()
        seconds, wire, text = [], 0, b""
        for i in range(args.scrapes):
            if i:
                time.sleep(SPACING)
            status, took, body, text = scrape(url)
            if status != 200:
                raise SystemExit(f"scrape {i}: HTTP {status}: {body[:200]!r}")
            seconds.append(took)
            wire = len(body)
        lines = [line for line in text.split(b"\n") if line and not line.startswith(b"#")]
        util = [line for line in lines if line.startswith(b"DCGM_FI_DEV_GPU_UTIL{")]
        attributed = sum(1 for line in util if b',pod="' in line)
        if args.pods and attributed < args.pods:
            raise SystemExit(f"{attributed} GPU_UTIL series carry a pod label, {args.pods} pods run")
        time.sleep(SPACING)
        status, plain_seconds, plain, _ = scrape(url, gzipped=False)
        plain_lines = sum(1 for line in plain.split(b"\n") if line and not line.startswith(b"#"))
        if status != 200 or plain_lines != len(lines):  # values move (energy), the series stay
            raise SystemExit(f"the plain scrape: HTTP {status}, {plain_lines} series, gzip's {len(lines)}")
        time.sleep(SPACING)
        results["crowd"] = crowd(url, args.crowd)
        peak.stop.set()
        peak.join()
        after = rss_kib(fleet.pid)[0]
        results["scrape"] = {
            "seconds": median_max(seconds),
            "gzipMiB": round(wire / 2**20, 2),
            "textMiB": round(len(text) / 2**20, 1),
            "series": len(lines),
            "gpuUtilSeriesWithPod": attributed,
            "plainSeconds": round(plain_seconds, 2),
        }
        results["fleetRssMiB"] = {
            "idle": round(idle / 1024, 1),
            "afterScrapes": round(after / 1024, 1),
            "peak": round(peak.kib / 1024, 1),
            "extraAtPeak": round((peak.kib - idle) / 1024, 1),
            "extraAfter": round((after - idle) / 1024, 1),
        }
        say(f"  scrapes: {results['scrape']}; fleet RSS {results['fleetRssMiB']}; crowd {results['crowd']}")

        anchor = []
        for i in range(args.scrapes):
            if i:
                time.sleep(SPACING)
            started = time.perf_counter()
            nodes, _ = kube.list(NODES)
            anchor.append(time.perf_counter() - started)
        results["anchorNodeList"] = {"seconds": median_max(anchor), "nodes": len(nodes)}
        say(f"  anchor, the Node list: {results['anchorNodeList']}")
    finally:
        if not args.keep:
            cluster.down()
    report(results, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
