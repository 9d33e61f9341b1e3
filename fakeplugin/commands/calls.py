"""`fakeplugin calls`: the gRPC calls a plugin answered, read from its call log."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fakeplugin.commands import flag, shared_flags

DESCRIPTION = """\
Show what the kubelet asked a plugin and what it answered: every gRPC call (GetInfo,
NotifyRegistrationStatus, NodePrepareResources, NodeUnprepareResources, NodeWatchResources, DRA v1
and v1beta1), when it arrived, for which claims, its result and how long it took.

Every plugin keeps this log in <plugins-dir>/<driver>/calls.jsonl, beside its checkpoint: one JSON
object per line, rotated to calls.jsonl.1 past 4 MiB (both are read). By default the calls of the
local cluster's plugins (`fakeplugin cluster up`) are shown; --file reads any call log.
"""

EPILOG = """\
examples:
  fakeplugin calls                                       every kubelet node of the local cluster
  fakeplugin calls --node gpu-node-1 --claim default/my-gpu
                                                         one claim's calls (namespace/name or UID)
  fakeplugin calls --method NodePrepareResources --json  one JSON object per line, e.g. for jq
  fakeplugin calls --file calls.jsonl                    any call log, e.g. in a plugin pod of the chart:
  kubectl exec -n fakeplugin POD -- \\
    fakeplugin calls --file /var/lib/kubelet/plugins/gpu.nvidia.com/calls.jsonl

columns: TIME (UTC, when the call arrived), NODE (several nodes only), METHOD, CLAIMS (namespace/name),
RESULT (ok or error: a claim or the call failed), DURATION, then the errors of failed calls.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calls",
        help="the gRPC calls a plugin answered (its call log)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--node")
    flag(
        p,
        "--claim",
        env="FAKEPLUGIN_CALLS_CLAIM",
        metavar="NS/NAME",
        help="only calls for this claim (namespace/name, or its UID)",
    )
    flag(
        p,
        "--method",
        env="FAKEPLUGIN_CALLS_METHOD",
        metavar="METHOD",
        help="only this method, e.g. NodePrepareResources",
    )
    flag(
        p, "--json", env="FAKEPLUGIN_CALLS_JSON", action="store_true", help="print the records as JSON lines"
    )
    flag(
        p,
        "--file",
        env="FAKEPLUGIN_CALLS_FILE",
        metavar="PATH",
        help="read this call log (calls.jsonl) instead of the local cluster's",
    )
    shared_flags(p, "--state-dir")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.file:
        if args.node:
            raise ValueError("--file and --node: give one (--node picks a node of the local cluster)")
        from fakeplugin.server.calllog import read_calls

        records = read_calls(Path(args.file), claim=args.claim, method=args.method)
    else:
        records = _cluster_calls(Path(args.state_dir), args.node, args.claim, args.method)
    if args.json:
        for record in records:
            print(json.dumps(record))
    else:
        sys.stdout.write(table(records))
    return 0


def _cluster_calls(state_dir: Path, node: str | None, claim: str | None, method: str | None) -> list[dict]:
    """The calls of one node, or of every kubelet node (each record with its "node"), oldest first."""
    from fakeplugin.cluster import Cluster, ClusterError

    cluster = Cluster(state_dir)
    if not cluster.layout.cluster_file.exists():
        raise ClusterError(
            f"no cluster in {state_dir} (start one with `fakeplugin cluster up`, or use --file)"
        )
    names = [node] if node else [n.name for n in cluster.nodes() if n.kubelet]
    records = [
        {"node": name, **record}
        for name in names
        for record in cluster.calls(name, claim=claim, method=method)
    ]
    return sorted(records, key=lambda r: r["time"])  # stable: each node's own order is kept


def table(records: list[dict[str, Any]]) -> str:
    """Aligned columns, one row per call; a NODE column when the records come from several nodes."""
    nodes = len({r.get("node") for r in records}) > 1
    header = ["TIME", *(["NODE"] if nodes else []), "METHOD", "CLAIMS", "RESULT", "DURATION"]
    rows = [
        [
            r["time"],
            *([r["node"]] if nodes else []),
            r["method"],
            ",".join(c.rsplit(":", 1)[0] for c in r.get("claims", [])) or "-",
            r["result"],
            f"{r['durationMs']:.1f}ms",
        ]
        for r in records
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    errors = ["", *(_errors(r.get("error")) for r in records)]
    lines = [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=True)), error]).rstrip()
        for row, error in zip([header, *rows], errors, strict=True)
    ]
    return "\n".join(lines) + "\n"


def _errors(error: str | dict[str, str] | None) -> str:
    if isinstance(error, dict):  # per claim UID
        return "; ".join(f"{uid}: {message}" for uid, message in error.items())
    return error or ""
