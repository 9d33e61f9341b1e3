"""`fakeplugin compute-domain-daemon run|check`: NVIDIA's compute-domain-daemon, the command the
ComputeDomain controller's DaemonSet runs (fakeplugin.drivers.computedomain.controller.objects.daemon_set).

The Kubernetes part is NVIDIA's (drivers.computedomain.daemon); instead of `nvidia-imex`, `run` keeps a
state file in the IMEX directory (`/imexd`, the daemon claim's mount): `READY` once this node's entry is in
the clique, unless the node carries the not-ready fault. `check` (the pod's probes) answers from it as
upstream answers from `nvidia-imex-ctl -q`.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from fakeplugin.commands import flag, shared_flags

log = logging.getLogger(__name__)

DESCRIPTION = """\
Run NVIDIA's compute-domain-daemon (its Kubernetes part) in a ComputeDomain's daemon pod: label the pod
with its clique ID, enter this node into the ComputeDomainClique <cdUID>.<cliqueID> (lowest free index,
NotReady), mirror the pod's readiness into that entry, and remove it on SIGTERM. Without a clique ID it
only idles. No IMEX daemon runs: `check` (the probes) reports READY once the entry exists, unless the node
has the annotation fakeplugin.dev/compute-domain-daemon-not-ready. Settings come from the environment the
DaemonSet and the daemon claim's CDI edits give (docs/compute-domains.md, "The daemon").
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compute-domain-daemon",
        help="NVIDIA's ComputeDomain daemon (clique entry, readiness), run in the daemon pods",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", choices=("run", "check"))
    for name, env, what in (
        ("--cliqueid", "CLIQUE_ID", "this node's clique ID (the daemon claim's CDI env)"),
        ("--compute-domain-uuid", "COMPUTE_DOMAIN_UUID", "the ComputeDomain's UID"),
        ("--compute-domain-name", "COMPUTE_DOMAIN_NAME", "the ComputeDomain's name"),
        ("--pod-ip", "POD_IP", "this pod's IP"),
        ("--pod-namespace", "POD_NAMESPACE", "this pod's namespace (the driver's)"),
    ):
        flag(p, name, env=env, default="", help=what)
    flag(
        p,
        "--compute-domain-namespace",
        env="COMPUTE_DOMAIN_NAMESPACE",
        default="default",
        help="its namespace",
    )
    shared_flags(p, "--node-name", "--pod-uid", "--pod-name", "--max-nodes-per-imex-domain", "--kubeconfig")
    flag(
        p, "--imex-dir", env="IMEX_DIR", default="/imexd", type=Path, metavar="DIR", help="the IMEX directory"
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.action == "check":
        return check(args)
    if not args.compute_domain_uuid:
        log.error("CDI container edits did not apply -- is CDI enabled in your container runtime?")
        return 1
    from fakeplugin.drivers.computedomain.daemon import (
        STATE_FILE,
        CliqueMember,
        DaemonError,
        DaemonRun,
        Identity,
    )
    from fakeplugin.kube import Kube, new_api_client

    kube = Kube(new_api_client(args.kubeconfig or None))
    who = Identity(
        cd_uid=args.compute_domain_uuid,
        clique_id=args.cliqueid,
        node_name=args.node_name,
        ip=args.pod_ip,
        namespace=args.pod_namespace,
        pod_name=args.pod_name,
        pod_uid=args.pod_uid,
        max_nodes=args.max_nodes_per_imex_domain,
        cd=f"{args.compute_domain_namespace}/{args.compute_domain_name}",
    )
    member = CliqueMember(kube, who)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        member.label_pod()
    except DaemonError as e:
        log.error("%s", e)
        return 1
    if not who.clique_id:
        log.info("no cliqueID: skipping controller and IMEX daemon management")
        stop.wait()
        return 0
    DaemonRun(kube, member, args.imex_dir / STATE_FILE).run(stop)
    return 0


def check(args: argparse.Namespace) -> int:
    if not args.cliqueid:
        print("check succeeded (noop, clique ID is empty)")
        return 0
    from fakeplugin.drivers.computedomain.daemon import READY, STATE_FILE

    try:
        text = (args.imex_dir / STATE_FILE).read_text()
    except OSError as e:
        log.error("IMEX daemon check failed: %s", e)
        return 1
    if text != READY:
        log.error("IMEX daemon not ready: %s", text.strip())
        return 1
    return 0
