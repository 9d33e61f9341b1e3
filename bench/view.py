"""The fleet view at a thousand nodes: page load and update latency.

    python bench/view.py                          # a local cluster: 1000 kwok nodes x 8 H200, the view
    python bench/view.py --nodes 100              # a quick look
    python bench/view.py --synthetic              # no cluster: the same store and server, objects fed in

Default: a local cluster (`fakeplugin cluster up --view-endpoint`: etcd, kube-apiserver, -scheduler,
-controller-manager, kwok for --nodes simulated H200 nodes, one `fakeplugin fleet` publishing their
slices, and `fakeplugin view` watching them), the view measured as a browser uses it:

  load       the page's first load over HTTP, as its script fetches it: /, view.js, view.css, then
             /api/summary and the first /api/nodes page (50 nodes, 400 GPU cells) side by side; each
             request timed and sized; --repeat times. The first /api/summary after a change includes
             building the model of every node (`model` below is that build alone, in this process)
  browser    with chromium present: a real headless browser's load, from navigation to the grid's
             400th cell in the DOM (tests/harness/browser.py)
  update     an API change until the page's data shows it, --updates times, each on another node:
             `cordon`: a Node made unschedulable (the view's own watch, no other component) until
             the SSE event arrived and until /api/nodes/<node> says unschedulable;
             `xid`: `fakeplugin.dev/device-faults: gpu-0=xid:79` on a Node until /api/nodes/<node>
             shows gpu-0 unhealthy: the fleet re-publishes the node's slice with the taint, the view's
             slice watch sees it (what a user waits for, the fleet's share included)
  rss        the view process's RSS once every node is listed, and its peak

--synthetic skips the cluster: --nodes Nodes and slices (the H200 slice `render` prints) go into the
view's store through the same code the watches call (FleetStore.replace / apply), served by the same
server; update latency is then store.apply → SSE event → JSON, no API server in between.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import (
    cluster_arguments,
    exit_on_sigterm,
    inventory_beside,
    machine,
    median_max,
    report,
    rss_kib,
    say,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.harness.browser, when chromium is there

from fakeplugin.inventory import load_inventory  # noqa: E402
from fakeplugin.render import render_documents  # noqa: E402
from fakeplugin.view.objects import kinds  # noqa: E402
from fakeplugin.view.server import ViewServer  # noqa: E402
from fakeplugin.view.store import FleetStore  # noqa: E402

GPUS = 8
PAGE = ("/", "/view.js", "/view.css")
DATA = ("/api/summary", "/api/nodes?offset=0&limit=50")


class Client:
    """Plain HTTP/1.1 GETs against the view, one connection each (as a browser's parallel fetches)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    def get(self, path: str) -> tuple[float, bytes]:
        started = time.perf_counter()
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
            return time.perf_counter() - started, body
        finally:
            connection.close()

    def node(self, name: str) -> dict[str, Any]:
        return json.loads(self.get(f"/api/nodes/{name}")[1])

    def events(self) -> Events:
        return Events(self.host, self.port)


class Events:
    """An open /api/events stream; `next()` blocks until the next `change` event, its version."""

    def __init__(self, host: str, port: int) -> None:
        self._sock = socket.create_connection((host, port), timeout=120)
        self._sock.sendall(b"GET /api/events HTTP/1.1\r\nHost: view\r\n\r\n")
        self._stream = self._sock.makefile("rb")
        while self._stream.readline() not in (b"\r\n", b""):
            pass
        self.version = self.next()

    def next(self) -> int:
        data = None
        while True:
            line = self._stream.readline()
            if not line:
                raise SystemExit("the event stream ended")
            if line.startswith(b"data: "):
                data = json.loads(line[6:])
            elif line == b"\n" and data is not None:
                return int(data["version"])

    def close(self) -> None:
        self._stream.close()
        self._sock.close()


def load(client: Client, repeat: int) -> dict[str, Any]:
    """The page's load as its script does it: the static files, then the two data requests at once."""
    totals, per_path, sizes = [], {p: [] for p in PAGE + DATA}, {}
    for _ in range(repeat):
        started = time.perf_counter()
        for path in PAGE:
            seconds, body = client.get(path)
            per_path[path].append(seconds)
            sizes[path] = len(body)
        with ThreadPoolExecutor(len(DATA)) as pool:
            fetched = dict(zip(DATA, pool.map(client.get, DATA), strict=True))
        for path, (seconds, body) in fetched.items():
            per_path[path].append(seconds)
            sizes[path] = len(body)
        totals.append(time.perf_counter() - started)
    full = client.get("/api/nodes?offset=0&limit=1000")
    return {
        "page load s": median_max(totals, 3),
        "per request ms": {p: median_max([s * 1000 for s in v], 1) for p, v in per_path.items()},
        "bytes": {**sizes, "/api/nodes?limit=1000 (every cell, asked for)": len(full[1])},
    }


def update(
    client: Client, nodes: list[str], change: Callable[[str], None], shown: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """For each node: `change(node)`, then the time to the next SSE event and until /api/nodes/<node>
    satisfies `shown` (re-read on each event)."""
    to_event, to_data = [], []
    for name in nodes:
        events = client.events()
        started = time.perf_counter()
        change(name)
        events.next()
        to_event.append(time.perf_counter() - started)
        while not shown(client.node(name)):
            events.next()
        to_data.append(time.perf_counter() - started)
        events.close()
    return {"to SSE event s": median_max(to_event, 3), "to the page's data s": median_max(to_data, 3)}


def browser_load(url: str, cells: int) -> dict[str, Any] | None:
    """A real chromium's load until `cells` GPU cells are in the DOM; None without chromium."""
    from tests.harness.browser import CHROMEDRIVER, CHROMIUM, chromium

    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        return None
    from selenium.webdriver.common.by import By

    times = []
    with chromium() as driver:
        for _ in range(3):
            started = time.perf_counter()
            driver.get(url)
            while len(driver.find_elements(By.CSS_SELECTOR, ".node .cell[data-device]")) < cells:
                if time.perf_counter() - started > 60:
                    raise SystemExit("the browser did not show the grid within 60 s")
                time.sleep(0.02)
            times.append(time.perf_counter() - started)
    return {"navigation to the grid's cells s": median_max(times, 3), "cells": cells}


def h200_slice() -> dict[str, Any]:
    docs = render_documents(load_inventory(REPO / "examples" / "mig.yaml"), node="h200-dynamic")
    (slice_,) = [d for d in docs if d["kind"] == "ResourceSlice"]
    devices = slice_["spec"]["devices"]
    slice_["spec"]["devices"] = [  # eight H200s, each its own UUID
        {
            **devices[i % len(devices)],
            "name": f"gpu-{i}",
            "attributes": {**devices[i % len(devices)]["attributes"], "uuid": {"string": f"GPU-{i:08x}"}},
        }
        for i in range(GPUS)
    ]
    return slice_


def node_object(name: str, unschedulable: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def synthetic(args: Any) -> dict[str, Any]:
    names = [f"h200-{i}" for i in range(args.nodes)]
    template = h200_slice()
    store = FleetStore(kinds("gpu.nvidia.com", "compute-domain.nvidia.com"))
    store.replace("nodes", [node_object(n) for n in names])
    store.replace(
        "gpu-slices",
        [
            {
                "metadata": {"name": f"{n}-slice"},
                "spec": {
                    **template["spec"],
                    "nodeName": n,
                    "pool": {"name": n, "generation": 1, "resourceSliceCount": 1},
                },
            }
            for n in names
        ],
    )
    for kind in ("cd-slices", "claims", "pods", "domains", "cliques"):
        store.replace(kind, [])
    started = time.perf_counter()
    store.model()
    model_s = time.perf_counter() - started
    server = ViewServer(store, "127.0.0.1", 0).start()
    client = Client(*server.address)
    try:
        results = {"model build s (every node)": round(model_s, 3), "load": load(client, args.repeat)}
        results["update"] = {
            "cordon (store.apply)": update(
                client,
                names[1 : 1 + args.updates],
                lambda n: store.apply("nodes", "MODIFIED", node_object(n, unschedulable=True)),
                lambda node: bool(node["unschedulable"]),
            )
        }
        results["browser"] = browser_load(server.url, 50 * GPUS)
    finally:
        server.close()
    return results


def on_cluster(args: Any) -> dict[str, Any]:
    from fakeplugin.cluster import Cluster
    from fakeplugin.kube import Kube, new_api_client

    path = inventory_beside(
        args.state_dir,
        [
            {
                "namePrefix": "h200-",
                "replicas": args.nodes,
                "kubelet": False,
                "gpus": [{"profile": "h200", "count": GPUS}],
            }
        ],
    )
    say(f"cluster up: {args.nodes} simulated H200 nodes and the view")
    started = time.monotonic()
    cluster = Cluster.up(path, args.state_dir, view_endpoint="127.0.0.1:0", watchdog=not args.keep)
    try:
        say(f"up in {time.monotonic() - started:.0f} s; view at {cluster.view_url}")
        host, port = cluster.view_url.removeprefix("http://").rstrip("/").rsplit(":", 1)
        client = Client(host, int(port))
        kube = Kube(new_api_client(str(cluster.kubeconfig)))
        (view,) = [p for p in cluster.status() if p.name == "view"]

        def listed() -> bool:
            return json.loads(client.get("/api/summary")[1])["totals"]["gpus"] == args.nodes * GPUS

        while not listed():
            time.sleep(0.5)
        results: dict[str, Any] = {"cluster up s": round(time.monotonic() - started, 1)}
        results["load"] = load(client, args.repeat)
        names = [f"h200-{i}" for i in range(1, 1 + args.updates)]
        cordon = update(
            client,
            names,
            lambda n: kube.patch(f"/api/v1/nodes/{n}", {"spec": {"unschedulable": True}}),
            lambda node: bool(node["unschedulable"]),
        )
        xid = update(
            client,
            names,
            lambda n: kube.annotate(f"/api/v1/nodes/{n}", {"fakeplugin.dev/device-faults": "gpu-0=xid:79"}),
            lambda node: node["gpus"][0]["state"] == "unhealthy",
        )
        results["update"] = {
            "cordon (the view's Node watch)": cordon,
            "xid (fleet re-publish, slice watch)": xid,
        }
        rss, peak = rss_kib(view.pid)
        results["view rss MiB"] = {"now": round(rss / 1024, 1), "peak": round(peak / 1024, 1)}
        results["browser"] = browser_load(cluster.view_url, 50 * GPUS)
        return results
    finally:
        if not args.keep:
            cluster.down(purge=True)


def main() -> None:
    parser = cluster_arguments(__doc__ or "", "/tmp/fp-bench-view")
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes, 8 H200 each (default 1000)")
    parser.add_argument("--repeat", type=int, default=10, help="page loads (default 10)")
    parser.add_argument("--updates", type=int, default=10, help="changes measured, each kind (default 10)")
    parser.add_argument("--synthetic", action="store_true", help="no cluster: objects fed to the store")
    args = parser.parse_args()
    exit_on_sigterm()
    results = {
        "machine": machine(),
        "nodes": args.nodes,
        "gpus": args.nodes * GPUS,
        "mode": "synthetic" if args.synthetic else "cluster",
        **(synthetic(args) if args.synthetic else on_cluster(args)),
    }
    report(results, args.json)


if __name__ == "__main__":
    main()
