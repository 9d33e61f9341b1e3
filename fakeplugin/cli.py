"""The `fakeplugin` command line: wires the command modules together."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from fakeplugin import __version__, logs
from fakeplugin.commands import flag

DESCRIPTION = """\
fakeplugin: a hardware-free stand-in for NVIDIA's Kubernetes DRA GPU driver (gpu.nvidia.com).

It publishes ResourceSlices shaped exactly like NVIDIA's driver publishes them, from a YAML
inventory of GPU profiles, and answers the kubelet's NodePrepareResources with real CDI specs, so
claims, CEL selectors and whole CI suites written for GPU nodes run on nodes without GPUs.
"""

EPILOG = """\
examples:
  fakeplugin profiles                                        list the GPU models we can emulate
  fakeplugin validate --inventory examples/seed-lab.yaml     check an inventory file
  fakeplugin render --inventory examples/seed-lab.yaml       print slices and DeviceClasses, no cluster
  NODE_NAME=node1 fakeplugin serve --inventory inv.yaml      run as a kubelet plugin on a node
  fakeplugin cluster up --inventory examples/seed-lab.yaml   a real local cluster, no Docker
  fakeplugin calls --node NODE --claim NS/NAME               what the kubelet asked a plugin, and its answers
  fakeplugin demo                                            the seed lab end to end, then clean up
"""


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser of every command, or of the one `argv` names alone (commands.parser_adders)."""
    from fakeplugin.commands import parser_adders

    parser = argparse.ArgumentParser(
        prog="fakeplugin",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fakeplugin {__version__}")
    flag(
        parser,
        "-v",
        "--verbosity",
        env="LOG_VERBOSITY",
        default=0,
        type=int,
        metavar="N",
        help="log verbosity: 0-3 info, 4-5 debug, 6 also every gRPC call",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_parser in parser_adders(argv):
        add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logs.setup(args.verbosity)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the last line of defence: one readable line, details at -v 4
        logging.getLogger("fakeplugin").debug("fatal", exc_info=True)
        print(f"fakeplugin {args.command}: error: {exc}", file=sys.stderr)
        return 1
