"""One module per CLI command; each exposes add_parser(subparsers).

Every flag can also be set through an environment variable (shown in --help), using the real
NVIDIA driver's names where one exists. A renamed flag or variable keeps working under its old name,
shown as deprecated in --help and warned about on use.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fakeplugin import DEFAULT_DRIVER_NAME, consumableshares, featuregates, releases

if TYPE_CHECKING:
    from fakeplugin.runtime.emulation import Emulation


def flag(
    parser: argparse.ArgumentParser,
    *names: str,
    env: str,
    default: Any = None,
    deprecated: Sequence[str] = (),
    deprecated_env: Sequence[str] = (),
    **kw: Any,
) -> None:
    """Add a flag whose default comes from the environment variable `env` (else the first of
    `deprecated_env` set); `deprecated`: its old flag names, still accepted."""
    value = os.environ.get(env)
    for old in deprecated_env:
        if value is None and old in os.environ:
            value = os.environ[old]
            # Said by cli.main only when this command runs (a subparser's defaults apply only then).
            parser.set_defaults(**{f"{DEPRECATED_ENV_PREFIX}{old}": f"{old} is deprecated; set {env}"})
    value = default if value is None else value
    if kw.get("type") is int and isinstance(value, str):
        value = int(value)
    if kw.get("action") == "store_true":
        value = str(value).lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
    help_text = kw.pop("help", "")
    shown = f" (default: {default})" if default not in (None, "", False) else ""
    old_names = ", ".join([*deprecated, *deprecated_env])
    note = f"; deprecated: {old_names}" if old_names else ""
    if deprecated:
        kw["action"] = _warn_on(kw.get("action", "store"), names[0], frozenset(deprecated))
    parser.add_argument(
        *names, *deprecated, default=value, help=f"{help_text}{shown} [env {env}{note}]", **kw
    )


DEPRECATED_ENV_PREFIX = "deprecated_env_"


def deprecation_warnings(args: argparse.Namespace) -> list[str]:
    """The deprecated environment variables the chosen command read, as warnings."""
    return [v for k, v in sorted(vars(args).items()) if k.startswith(DEPRECATED_ENV_PREFIX)]


def _warn_on(action: str, name: str, old: frozenset[str]) -> type[argparse.Action]:
    """argparse's `action` that says so when one of the `old` names was used."""
    base = {"store": argparse._StoreAction, "store_true": argparse._StoreTrueAction}[action]

    class Warned(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
            if option_string in old:
                print(f"fakeplugin: {option_string} is deprecated; use {name}", file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    return Warned


def inventory_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """`--inventory FILE` (once `--config`, which still works)."""
    flag(
        parser,
        "--inventory",
        env="FAKEPLUGIN_INVENTORY",
        deprecated=("--config",),
        deprecated_env=("FAKEPLUGIN_CONFIG",),
        metavar="FILE",
        help=help,
    )


def emulation_flags(parser: argparse.ArgumentParser, *, driver_name_help: str, device_nodes: bool) -> None:
    """What is emulated (runtime.emulation): --driver-name, --driver-release, --feature-gates (NVIDIA's,
    under the real driver's name), --consumable-shares; with `device_nodes`, --fake-device-nodes."""
    flag(
        parser,
        "--driver-name",
        env="DRIVER_NAME",
        default=DEFAULT_DRIVER_NAME,
        metavar="NAME",
        help=driver_name_help,
    )
    flag(
        parser,
        "--driver-release",
        env="DRIVER_RELEASE",
        default="",
        metavar="RELEASE",
        help="NVIDIA driver release to emulate (its gates, slice names, opaque config rules); empty: the "
        f"inventory's driverRelease, read once at start; known: {releases.known()}",
    )
    flag(
        parser,
        "--feature-gates",
        env="FEATURE_GATES",
        default="",
        metavar="LIST",
        help="NVIDIA driver feature gates (the driver's own, not Kubernetes'), e.g. "
        "TimeSlicingSettings=true; known (by release): " + ", ".join(featuregates.KNOWN),
    )
    consumable_shares_flag(parser)
    if device_nodes:
        flag(
            parser,
            "--fake-device-nodes",
            env="FAKE_DEVICE_NODES",
            action="store_true",
            help="CDI specs also inject /dev/nvidia<minor>, /dev/nvidiactl and /dev/nvidia-uvm* as character "
            "devices (the runtime creates them; nothing on the host is needed)",
        )


def emulated(args: argparse.Namespace, inventory_release: str) -> Emulation:
    """The Emulation of the emulation flags; `inventory_release`: the inventory's driverRelease, used when
    --driver-release is empty. ValueError names the flag at fault."""
    from fakeplugin.runtime.emulation import emulation

    return emulation(
        release=args.driver_release or inventory_release,
        driver_name=args.driver_name,
        feature_gates=args.feature_gates,
        consumable_shares=args.consumable_shares,
        device_nodes=getattr(args, "fake_device_nodes", False),
    )


PLUGINS = ("gpus", "compute-domains")  # NVIDIA's chart names its two kubelet plugin containers so
COMPUTE_DOMAINS = "compute-domains"


def plugin_flag(parser: argparse.ArgumentParser) -> None:
    """`--plugin gpus|compute-domains`: which of NVIDIA's two kubelet plugins to be."""
    flag(
        parser,
        "--plugin",
        env="FAKEPLUGIN_PLUGIN",
        default="gpus",
        choices=PLUGINS,
        help="which NVIDIA kubelet plugin: gpus (gpu.nvidia.com) or compute-domains "
        "(compute-domain.nvidia.com: IMEX channels and daemons, docs/compute-domains.md)",
    )


def plugin_driver_name(args: argparse.Namespace) -> str:
    """--driver-name, whose default for --plugin compute-domains is compute-domain.nvidia.com."""
    if args.plugin == COMPUTE_DOMAINS and args.driver_name == DEFAULT_DRIVER_NAME:
        from fakeplugin.apis.computedomain import DRIVER_NAME

        return DRIVER_NAME
    return str(args.driver_name)


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
    "computedomaincontroller",
    "computedomaindaemon",
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
