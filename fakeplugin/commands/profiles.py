"""`fakeplugin profiles`: the GPU models an inventory can use."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from fakeplugin.commands import flag
from fakeplugin.profiles import Profile, load_profile, profile_names
from fakeplugin.quantity import format_binary_si

DESCRIPTION = """\
List the GPU profiles (models) an inventory's `gpus[].profile` can name, with the values their
devices publish: NVML product name, memory total (capacity.memory) in the default ECC mode,
architecture, CUDA compute capability and MIG profiles. Each profile's data file
(fakeplugin/profiles/<name>.yaml) cites where its values come from and says what is unknown.
"""

EPILOG = """\
examples:
  fakeplugin profiles
  fakeplugin profiles --output yaml
"""

# Memory columns: NVML memory.total (= capacity.memory) per ECC mode; "-" where no real value is known.
_COLUMNS = ("NAME", "PRODUCT NAME", "ARCH", "CC", "MEMORY ECC ON", "MEMORY ECC OFF", "DEFAULT ECC", "MIG")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "profiles",
        help="list the GPU models an inventory can use",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flag(
        p,
        "--output",
        "-o",
        env="FAKEPLUGIN_OUTPUT",
        default="table",
        choices=("table", "yaml"),
        help="output format",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    profiles = [load_profile(name) for name in profile_names()]
    if args.output == "yaml":
        sys.stdout.write(yaml.safe_dump([describe(p) for p in profiles], sort_keys=False))
    else:
        sys.stdout.write(table(profiles))
    return 0


def describe(p: Profile) -> dict[str, Any]:
    """The published values of a profile, in the API's units (quantities, version strings)."""
    memory = {
        mode: format_binary_si(value)
        for mode, value in (("eccOn", p.memory_ecc_on_bytes), ("eccOff", p.memory_ecc_off_bytes))
        if value is not None
    }
    return {
        "name": p.name,
        "productName": p.product_name,
        "brand": p.brand,
        "architecture": p.architecture,
        "cudaComputeCapability": p.cuda_compute_capability,
        "memory": memory,
        "eccDefault": p.ecc_default,
        "mig": [m.name for m in p.mig.profiles] if p.mig else [],
    }


def table(profiles: list[Profile]) -> str:
    rows = [_COLUMNS]
    for p in profiles:
        on, off = (format_binary_si(b) if b else "-" for b in (p.memory_ecc_on_bytes, p.memory_ecc_off_bytes))
        mig = f"{len(p.mig.profiles)} profiles" if p.mig else "-"
        ecc = "on" if p.ecc_default else "off"
        rows.append((p.name, p.product_name, p.architecture, p.cuda_compute_capability, on, off, ecc, mig))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )
