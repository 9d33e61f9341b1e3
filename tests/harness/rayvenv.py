"""Ray from PyPI for tests/e2e/test_ray.py: a virtual environment with `ray==RAY_VERSION`, created once under
the build cache (`<cache>/ray/<version>/venv`, about 285 MB installed from a 79 MB wheel), and the accelerator
type Ray derives from an NVML device name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.harness.tooling import unavailable

RAY_VERSION = "2.60.0"


def python(cache_root: Path) -> Path:
    """The venv's Python, the venv created unless it is there: built in a temporary directory beside it and
    renamed (only its `bin/python` is used, which a rename does not break). PyPI unreachable: skipped, or
    failed when CI=true."""
    target = cache_root / "ray" / RAY_VERSION / "venv"
    if (target / "bin" / "python").exists():
        return target / "bin" / "python"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        done = subprocess.run(
            [*pip, f"ray=={RAY_VERSION}"], capture_output=True, text=True, timeout=1200, check=False
        )
        if done.returncode != 0:
            unavailable(
                f"pip could not install ray=={RAY_VERSION} (exit {done.returncode}):\n{done.stderr[-2000:]}"
            )
        os.replace(venv, target)
    return target / "bin" / "python"


def accelerator_type(nvml_name: str) -> str:
    """Ray's accelerator type for a GPU of this NVML name (ray-project/ray 2.60.0,
    `python/ray/_private/accelerators/nvidia_gpu.py`, `_gpu_name_to_accelerator_type`): after the first word
    (`NVIDIA`, `Tesla`), the all-capital words up to and including the first one with a digit, that word cut
    at its first character other than a capital or a digit, joined by `-` ("NVIDIA RTX A5000" → `RTX-A5000`,
    "Tesla V100-SXM2-16GB" → `V100`); a name without one (mixed case, "NVIDIA GeForce RTX 5090"): the name
    less a leading `NVIDIA`, blanks as `-`."""
    words: list[str] = []
    for word in nvml_name.split()[1:]:
        model = re.match(r"[A-Z0-9]*", word)
        assert model is not None  # `*` matches the empty string
        if any(c.isdigit() for c in model.group()):
            return "-".join([*words, model.group()])
        if not re.fullmatch(r"[A-Z]+", word):
            break
        words.append(word)
    return re.sub(r"^NVIDIA\s+", "", nvml_name).strip().replace(" ", "-")
