"""The mock NVML library seen by a real consumer: `probe` runs nvml_probe.py (nvidia-ml-py, PyTorch's raw
calls) in a process that finds the library by name and reads a description directory; `describe` writes
a container's description as the devices' CDI edits mount it; `published` the devices and ResourceSlice
entries NVML's answers are checked against."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from fakeplugin import nvml
from fakeplugin.drivers.gpu.prepare import nvmldata
from fakeplugin.drivers.gpu.publish.node import node_devices, node_slices
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from tests.harness import DRIVER

PROBE = Path(__file__).with_name("nvml_probe.py")
# Nodes of examples/seed-lab.yaml (the reference lab), and a static MIG layout.
T10_NODE = "capi-dralabs-md-gput10-gzl84-f2m2d"
A5000_NODE = "capi-dralabs-md-gpua5000-jw4mx-d64jz"
STATIC_MIG = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: mig-node
  gpus:
  - profile: a100-40gb
    count: 2
    mig:
    - {profile: 3g.20gb}
    - {profile: 1g.5gb, count: 2}
"""


def inventory(text: str) -> Any:
    return parse_inventory(yaml.safe_load(text), "inv.yaml")


def published(
    inv: Any, node: str, *, dynamic_mig: bool = False
) -> tuple[dict[str, GpuDevice], dict[str, Any]]:
    """The node's devices by name, and the ResourceSlice entries of the same devices by name."""
    devices = {d.name: d for d in node_devices(inv, node, {}, dynamic_mig=dynamic_mig)}
    slices = node_slices(inv, node, node_uid="uid", driver=DRIVER, dynamic_mig=dynamic_mig)
    entries = {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}
    return devices, entries


def attribute(entry: dict[str, Any], name: str) -> Any:
    return next(iter(entry["attributes"][name].values()))


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
