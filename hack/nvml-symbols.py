#!/usr/bin/env python3
"""Write fakeplugin/nvml/symbols.txt: every function NVIDIA's nvml.h declares, which the mock NVML library
exports (fakeplugin/nvml/build.py stubs those nvml.c does not define). Standard library only.

  nvml-symbols.py NVML_H SOURCE [--go-nvml NVML_GO]
      NVML_H: NVIDIA/go-nvml's gen/nvml/nvml.h at the tag SOURCE names (e.g. "NVIDIA/go-nvml v0.13.3-0
      gen/nvml/nvml.h"); with --go-nvml, go-nvml's pkg/nvml/nvml.go of the same tag, whose cgo calls
      (every symbol a Go program on go-nvml resolves) must all be among them.

For example, from a clone of github.com/NVIDIA/go-nvml:
  git -C go-nvml show v0.13.3-0:gen/nvml/nvml.h >/tmp/nvml.h
  git -C go-nvml show v0.13.3-0:pkg/nvml/nvml.go >/tmp/nvml.go
  hack/nvml-symbols.py /tmp/nvml.h "NVIDIA/go-nvml v0.13.3-0 gen/nvml/nvml.h" --go-nvml /tmp/nvml.go
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "fakeplugin" / "nvml" / "symbols.txt"
_NAME = re.compile(r"\b(nvml\w+)\s*\(")


def declared(header: str) -> list[str]:
    """The functions of the header: the name before "(" on each line that declares with DECLDIR."""
    names = set()
    for line in header.splitlines():
        if "DECLDIR" in line and not line.lstrip().startswith("#"):
            match = _NAME.search(line)
            if match:
                names.add(match.group(1))
    return sorted(names)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("header", type=Path)
    parser.add_argument("source")
    parser.add_argument("--go-nvml", type=Path)
    args = parser.parse_args()
    names = declared(args.header.read_text(encoding="utf-8"))
    if args.go_nvml is not None:
        calls = set(re.findall(r"\bC\.(nvml\w+)\(", args.go_nvml.read_text(encoding="utf-8")))
        missing = sorted(calls - set(names))
        if missing:
            print(f"go-nvml calls what the header does not declare: {', '.join(missing)}", file=sys.stderr)
            return 1
    lines = [
        f"# Every function {args.source} declares: what the mock NVML library exports.",
        "# Written by hack/nvml-symbols.py; do not edit.",
        *names,
    ]
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(names)} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
