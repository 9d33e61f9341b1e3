"""`fakeplugin validate`: check an inventory file and report every problem at once."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fakeplugin.commands import shared_flags
from fakeplugin.drivers.gpu import node_devices
from fakeplugin.inventory import Inventory, InventoryError, load_inventory

DESCRIPTION = """\
Check an inventory file: YAML syntax, unknown or misspelt fields, types, known GPU profiles,
versions, counts, duplicate node names, UUID and PCI overrides, and the devices each named node
would get. Prints one summary line and exits 0 when valid; otherwise prints every problem as
`<file>: <field path>: <problem>` on stderr and exits 1.
"""

EPILOG = """\
examples:
  fakeplugin validate --inventory examples/seed-lab.yaml
  FAKEPLUGIN_INVENTORY=inv.yaml fakeplugin validate

a problem looks like:
  inv.yaml: nodes[1].gpus[0].count: must be at least 1, got 0
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "validate",
        help="check an inventory file, reporting every problem",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--inventory")
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    if not args.inventory:
        args.parser.error("--inventory (or FAKEPLUGIN_INVENTORY) is required")
    try:
        inv = load_inventory(args.inventory)
        problems = device_problems(inv)
    except InventoryError as exc:
        problems = exc.problems
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print(
            f"{len(problems)} problem{'s' if len(problems) > 1 else ''} in {args.inventory}", file=sys.stderr
        )
        return 1
    print(summary(inv))
    return 0


def device_problems(inv: Inventory) -> list[str]:
    """Problems only visible once devices are made (an override equal to a derived identity); one per
    entry, the first of its nodes that shows it."""
    problems = []
    for entry in inv.nodes:
        for name in entry.node_names():
            try:
                node_devices(inv, name, {})
            except ValueError as exc:
                problems.append(f"{inv.source}: {exc}")
                break
    return problems


def summary(inv: Inventory) -> str:
    named = [e for e in inv.nodes if e.match_labels is None]
    selectors = len(inv.nodes) - len(named)
    nodes = sum(e.replicas for e in named)
    gpus = sum(e.gpu_count * e.replicas for e in named)
    gpu_nodes = sum(e.replicas for e in named if e.gpu_count)
    by_selector = f" + {selectors} selector entr{'ies' if selectors != 1 else 'y'}" if selectors else ""
    return (
        f"{inv.source}: valid: {nodes} node{'s' if nodes != 1 else ''}{by_selector}, "
        f"{gpus} GPU{'s' if gpus != 1 else ''} on {gpu_nodes} node{'s' if gpu_nodes != 1 else ''} "
        f"(driver {inv.driver_version}, CUDA {inv.cuda_driver_version})"
    )
