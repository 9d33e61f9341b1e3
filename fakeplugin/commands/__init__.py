"""One module per CLI command; each exposes add_parser(subparsers).

Every flag can also be set through an environment variable (shown in --help), using the real
NVIDIA driver's names where one exists.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from fakeplugin import consumableshares


def flag(parser: argparse.ArgumentParser, *names: str, env: str, default: Any = None, **kw: Any) -> None:
    """Add a flag whose default comes from the environment variable `env`."""
    value = os.environ.get(env, default)
    if kw.get("type") is int and isinstance(value, str):
        value = int(value)
    if kw.get("action") == "store_true":
        value = str(value).lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
    help_text = kw.pop("help", "")
    shown = f" (default: {default})" if default not in (None, "", False) else ""
    parser.add_argument(*names, default=value, help=f"{help_text}{shown} [env {env}]", **kw)


def consumable_shares_flag(parser: argparse.ArgumentParser) -> None:
    """`--consumable-shares` of serve, render and fleet (main 95932046 cmd/gpu-kubelet-plugin/main.go)."""
    flag(
        parser,
        "--consumable-shares",
        env="CONSUMABLE_SHARES",
        default=consumableshares.DISABLED,
        metavar="MODE",
        help="devices several claims can share, each consuming part (release 0.5.0-dev with its gate "
        "ConsumableShares): disabled, memory, unlimited or a number of shares (docs/consumable-shares.md)",
    )


# Command modules, in the order `fakeplugin --help` lists them. Each defines add_parser(subparsers).
_MODULES: tuple[str, ...] = (
    "demo",
    "serve",
    "fleet",
    "render",
    "validate",
    "profiles",
    "cluster",
    "calls",
    "fault",
)


def _load() -> list[Any]:
    import importlib

    return [importlib.import_module(f"fakeplugin.commands.{m}").add_parser for m in _MODULES]


COMMANDS = _load()
