"""The go-nvlib consumer (tests/data/gonvlib/main.go): built with the machine's Go into the build cache,
`<cache>/gonvlib/<hash>/gonvlib`, once per source and Go version; `run` lists what it derives through the
mock NVML library.

go-nvml's cgo code does not compile as published here: its `pkg/nvml/nvml.h` wraps `nvmlDevice_t` (and the
other handles) in a one-pointer struct, while the cgo prolog Go generates passes the bare pointer (gcc:
"incompatible type for argument 1 ... expected 'nvmlDevice_t' but argument is of type 'struct nvmlDevice_st
*'", as in NVIDIA/go-nvml issue #102). The build puts go-nvml's own generator header of the same version
(`gen/nvml/nvml.h`, where the handles are the bare pointers: the same ABI) first for `#include "nvml.h"`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fakeplugin import nvml

SOURCE = Path(__file__).parent.parent / "data" / "gonvlib"
FILES = ("main.go", "go.mod", "go.sum")
GO_NVML = "github.com/NVIDIA/go-nvml"


def go_env() -> dict[str, str]:
    return {**os.environ, "GOFLAGS": "-mod=mod", "CGO_ENABLED": "1"}


def build(cache_root: Path) -> Path:
    """The consumer's binary under `cache_root`, built unless it is there (RuntimeError: go's output)."""
    version = subprocess.run(["go", "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    digest = hashlib.sha256(version.encode())
    for name in FILES:
        digest.update((SOURCE / name).read_bytes())
    target = cache_root / "gonvlib" / digest.hexdigest()[:16] / "gonvlib"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        for name in FILES:
            shutil.copy(SOURCE / name, Path(tmp) / name)
        env = go_env()
        module = _go(["go", "list", "-m", "-f", "{{.Dir}}", GO_NVML], tmp, env).strip()
        env["CGO_CFLAGS"] = f"-O2 -g -iquote {module}/gen/nvml"
        _go(["go", "build", "-trimpath", "-o", str(Path(tmp) / "gonvlib"), "."], tmp, env)
        os.replace(Path(tmp) / "gonvlib", target)
    return target


def _go(argv: list[str], cwd: str, env: dict[str, str]) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout


def run(binary: Path, library_dir: Path, description: Path) -> list[dict[str, Any]]:
    """What the consumer prints, `libnvidia-ml.so.1` found in `library_dir`, reading `description`."""
    env = {k: v for k, v in os.environ.items() if k != nvml.DESCRIPTION_ENV}
    env["LD_LIBRARY_PATH"] = str(library_dir)
    env[nvml.DESCRIPTION_ENV] = str(description)
    done = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return json.loads(done.stdout)
