"""`fakeplugin view`: a read-only live web page of the fleet, its nodes and their GPUs."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import TYPE_CHECKING

from fakeplugin.commands import compute_domain_driver_name, flag, shared_flags

if TYPE_CHECKING:
    from fakeplugin.kube import Kube

log = logging.getLogger("fakeplugin.view")

DEFAULT_ENDPOINT = "127.0.0.1:8470"

DESCRIPTION = """\
Serve a picture of the cluster's GPUs: a web page of every node and its GPUs as a grid, each GPU free,
allocated (to which claim and pod), tainted or unhealthy (NVIDIA's XID and gpu-lost taints), MIG
partitions under their GPU, and the NVLink racks (nodes by nvidia.com/gpu.clique) with their
ComputeDomains and cliques. Read-only: it only lists and watches Nodes, ResourceSlices, ResourceClaims,
Pods, ComputeDomains and ComputeDomainCliques, and answers GET alone.

Live: the watches' changes reach the page as Server-Sent Events (nothing re-lists on a timer). Built for
large fleets: the page first shows totals per group (GPU model, or --view-group-label's value) and per rack;
the grid is a filtered page of nodes (by state, group, rack, a node, claim or pod name), 50 at a time,
and a node's card opens its details. The same data is JSON: /api/summary, /api/nodes?state=unhealthy,
/api/nodes/<name>, /api/events (docs/fleet-view.md).

Bound to loopback by default: anyone who can reach the port sees every claim's and pod's name.
"""

EPILOG = """\
examples:
  fakeplugin view --kubeconfig ~/.cache/fakeplugin/cluster/admin.kubeconfig     # http://127.0.0.1:8470/
  fakeplugin view --endpoint 127.0.0.1:9000 --view-group-label node.kubernetes.io/instance-type
  curl -s 'http://127.0.0.1:8470/api/nodes?state=unhealthy&limit=10'
  fakeplugin cluster up --inventory examples/seed-lab.yaml --view-endpoint 127.0.0.1:0   # runs it too
  fakeplugin fleet --inventory fleet.yaml --view-endpoint 127.0.0.1:8470                 # beside a fleet
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="a read-only live web page of the nodes and their GPUs",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--kubeconfig")
    flag(
        p,
        "--endpoint",
        env="FAKEPLUGIN_VIEW_ADDRESS",
        default=DEFAULT_ENDPOINT,
        metavar="HOST:PORT",
        help="where the page is served (PORT 0: a free port, printed); 0.0.0.0 exposes it beyond loopback",
    )
    view_flags(p)
    shared_flags(p, "--driver-name")
    p.set_defaults(func=run)


def view_flags(parser: argparse.ArgumentParser) -> None:
    """The page's own settings, for `view` and every host that serves it."""
    shared_flags(parser, "--view-group-label", "--view-max-clients")


def start(args: argparse.Namespace, kube: Kube, endpoint: str, stop: threading.Event, what: str) -> str:
    """Start the view of `args` (its view_flags and --driver-name) on `endpoint` through `kube`; its URL."""
    from fakeplugin.view.app import start_view

    server = start_view(
        kube,
        endpoint,
        gpu_driver=args.driver_name,
        cd_driver=compute_domain_driver_name(args.driver_name),
        stop=stop,
        group_label=args.view_group_label,
        max_clients=args.view_max_clients,
        what=what,
    )
    log.info("the fleet view: %s", server.url)
    return server.url


def run(args: argparse.Namespace) -> int:
    from fakeplugin.kube import Kube, new_api_client

    kube = Kube(new_api_client(args.kubeconfig or None, connections=10))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    url = start(args, kube, args.endpoint, stop, "--endpoint")
    print(f"view: {url}", flush=True)
    stop.wait()
    return 0
