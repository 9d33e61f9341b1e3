"""GpuDevice values for unit tests: one base device per model, numbered copies with `numbered`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fakeplugin.model import GpuDevice
from fakeplugin.profiles import load_profile

T10 = GpuDevice(
    name="gpu-0",
    type="gpu",
    minor=0,
    index=0,
    uuid="GPU-00000000-1111-2222-3333-444444444444",
    product_name="NVIDIA T10",
    brand="Nvidia",
    architecture="Turing",
    cuda_compute_capability="7.5",
    driver_version="580.126.20",
    cuda_driver_version="13.0",
    memory_bytes=16106127360,
    pci_bus_id="0000:03:00.0",
    pcie_root=None,
    addressing_mode=None,
    profile="t10",
    board=load_profile("t10").board(ecc=True, memory_bytes=16106127360),
)

# As the captured H200 host (tests/data/nvidia-smi-h200) reports its first GPU.
H200 = GpuDevice(
    name="gpu-0",
    type="gpu",
    minor=0,
    index=0,
    uuid="GPU-bd363601-0402-2785-a79b-f013317dbdce",
    product_name="NVIDIA H200",
    brand="Nvidia",
    architecture="Hopper",
    cuda_compute_capability="9.0",
    driver_version="580.159.04",
    cuda_driver_version="13.0",
    memory_bytes=150754820096,
    pci_bus_id="0000:00:06.0",
    pcie_root="pci0000:00",
    addressing_mode="None",
    profile="h200",
    board=load_profile("h200").board(ecc=True, memory_bytes=150754820096),
)


def numbered(base: GpuDevice, minor: int, **changes: Any) -> GpuDevice:
    """`base` as the GPU with this minor (name gpu-<minor>, index = minor), plus `changes`."""
    return replace(base, name=f"gpu-{minor}", minor=minor, index=minor, **changes)
