"""The mock NVML library seen by a real consumer: `probe` runs nvml_probe.py (nvidia-ml-py, PyTorch's raw
calls) in a process that finds the library by name and reads a description directory; `describe` writes
a container's description as the devices' CDI edits mount it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakeplugin import nvml
from fakeplugin.drivers.gpu.prepare import nvmldata
from fakeplugin.model import GpuDevice

PROBE = Path(__file__).with_name("nvml_probe.py")


def probe(library_dir: Path, description: Path | None, *args: str) -> tuple[dict[str, Any], str]:
    """What the probe prints (JSON) and its stderr, `libnvidia-ml.so.1` found in `library_dir`;
    `description`: the directory the library reads (None: its default)."""
    env = {k: v for k, v in os.environ.items() if k != nvml.DESCRIPTION_ENV}
    env["LD_LIBRARY_PATH"] = str(library_dir)
    if description is not None:
        env[nvml.DESCRIPTION_ENV] = str(description)
    done = subprocess.run(
        [sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr  # the host process survives whatever NVML says
    return json.loads(done.stdout), done.stderr


def describe(directory: Path, devices: Sequence[GpuDevice]) -> Path:
    """The description directory of a container that got `devices`."""
    directory.mkdir(parents=True, exist_ok=True)
    for device in devices:
        path = directory / nvmldata.file_name(device.name)
        path.write_text(nvmldata.render_device(device), encoding="utf-8")
    return directory
