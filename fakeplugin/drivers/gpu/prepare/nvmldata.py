"""The description the mock NVML library (fakeplugin/nvml) reads in a container: its GPUs as NVML reports
them, written from the devices of the container's claim (pure).

The values come from the same places as the fake nvidia-smi's (`smi.py`) and the ResourceSlices': the
device model, its profile's board, `smi`'s serial, bus ID form and idle readings, `fakeplugin.mig`'s GPU
instance IDs; a test holds NVML and nvidia-smi equal. As nvidia-smi lists them: one physical GPU per
minor, in minor order, NVML indices 0..n-1 (a container's NVML counts from 0, whatever the host's index);
a MIG device as its parent GPU in MIG mode with the container's MIG devices under it, in placement
order. The format is the one `fakeplugin/nvml/nvml.c` parses (docs/emulation.md, "NVML in the
container").
"""

from __future__ import annotations

from collections.abc import Sequence

from fakeplugin.drivers.gpu.prepare.smi import (
    IDLE_POWER_FRACTION,
    IDLE_TEMPERATURE_C,
    nvml_bus_id,
    serial_number,
)
from fakeplugin.mig import gpu_instance_id
from fakeplugin.model import GpuDevice
from fakeplugin.profiles import BRANDS, NVML_ARCHITECTURES, load_profile

DESCRIPTION_ENV = "FAKEPLUGIN_NVML_DESCRIPTION"  # read by nvml.c; unset: DESCRIPTION_CONTAINER_PATH
DESCRIPTION_CONTAINER_PATH = "/run/fakeplugin/nvml/description"
FORMAT = 1
MAX_LINE = 254  # nvml.c reads lines of at most 255 bytes with their newline
_MIB = 1024 * 1024
_NVIDIA_VENDOR = 0x10DE
_COMPUTE_INSTANCE_ID = 0  # the one compute instance spanning its GPU instance, as the driver creates it


def nvml_cuda_version(version: str) -> int:
    """NVML's CUDA driver version number of "13.0": 13000 (major * 1000 + minor * 10)."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return major * 1000 + minor * 10


def nvml_version(device: GpuDevice) -> str:
    """nvmlSystemGetNVMLVersion: the CUDA major, then the driver version ("13.580.126.20"). [I] from real
    output (12.535.133.00 with driver 535.133.00, 12.560.35.03 with 560.35.03)."""
    return f"{device.cuda_driver_version.split('.')[0]}.{device.driver_version}"


def max_mig_devices(device: GpuDevice) -> int:
    """nvmlDeviceGetMaxMigDeviceCount: the most MIG devices the GPU's profile allows (its most instances
    of one GPU-instance profile); 0 when it is not MIG capable."""
    capability = load_profile(device.profile).mig
    return max((p.instances for p in capability.profiles), default=0) if capability else 0


def gpu_values(device: GpuDevice, mig_mode: bool) -> dict[str, str]:
    """The `[gpu]` keys of `device`'s physical GPU (a MIG device's parent, whose identity it carries)."""
    board = device.board
    uuid = device.parent_uuid if device.mig is not None and device.parent_uuid else device.uuid
    major, minor = device.cuda_compute_capability.split(".")
    values = {
        "name": device.product_name,
        "uuid": uuid,
        "serial": serial_number(uuid),
        "bus_id": nvml_bus_id(device.pci_bus_id),
        "pci_device_id": f"0x{board.pci_device_id << 16 | _NVIDIA_VENDOR:08X}",
        "minor": str(device.minor),
        "memory_total": str(board.memory_bytes),
        "memory_reserved": str((board.reserved_memory_mib or 0) * _MIB),
        "cc_major": major,
        "cc_minor": minor,
        "architecture": str(NVML_ARCHITECTURES[device.architecture]),
        "brand": str(BRANDS.index(device.brand)),  # BRANDS is NVML's brand enum in order
        "temperature_c": str(IDLE_TEMPERATURE_C),
        "mig_capable": str(int(board.mig_capable)),
        "mig_mode": str(int(mig_mode)),
    }
    if board.pci_subsystem_id is not None:
        values["pci_subsystem_id"] = f"0x{board.pci_subsystem_id << 16 | _NVIDIA_VENDOR:08X}"
    if board.power_limit_watts is not None:
        values["power_limit_mw"] = str(board.power_limit_watts * 1000)
        # nvidia-smi's draw in mW, as it prints it in W with two decimals
        values["power_usage_mw"] = str(round(board.power_limit_watts * IDLE_POWER_FRACTION * 100) * 10)
    if board.mig_capable:
        values["max_mig_devices"] = str(max_mig_devices(device))
    return values


def mig_values(device: GpuDevice) -> dict[str, str]:
    """The `[mig]` keys of a MIG device."""
    assert device.mig is not None
    return {
        "name": f"{device.product_name} MIG {device.mig.profile}",  # as NVML names MIG devices
        "uuid": device.uuid,
        "memory_total": str(device.memory_bytes),
        "gpu_instance_id": str(gpu_instance_id(device)),
        "compute_instance_id": str(_COMPUTE_INSTANCE_ID),
    }


def render_description(devices: Sequence[GpuDevice]) -> str:
    """The description of a container that got `devices` (as Prepare hands them out: DynamicMIG partitions
    created, `fakeplugin.mig.created_for_claim`). ValueError names a device it cannot describe."""
    if not devices:
        raise ValueError("a container without GPUs gets no NVML description")
    by_minor: dict[int, list[GpuDevice]] = {}
    for device in devices:
        if not device.uuid:
            raise ValueError(f"{device.name}: a DynamicMIG partition has no UUID before Prepare creates it")
        by_minor.setdefault(device.minor, []).append(device)
    first = devices[0]
    lines = [
        "# fakeplugin NVML description (fakeplugin/drivers/gpu/prepare/nvmldata.py)",
        f"format={FORMAT}",
        f"driver_version={first.driver_version}",
        f"nvml_version={nvml_version(first)}",
        f"cuda_driver_version={nvml_cuda_version(first.cuda_driver_version)}",
    ]
    for minor in sorted(by_minor):
        group = by_minor[minor]
        migs = sorted((d for d in group if d.mig is not None), key=lambda d: d.mig.start if d.mig else 0)
        lines += ["[gpu]", *_lines(group[0], gpu_values(group[0], mig_mode=bool(migs)))]
        for mig in migs:
            lines += ["[mig]", *_lines(mig, mig_values(mig))]
    return "\n".join(lines) + "\n"


def _lines(device: GpuDevice, values: dict[str, str]) -> list[str]:
    lines = [f"{key}={value}" for key, value in values.items()]
    for line in lines:
        if "\n" in line or "\r" in line or len(line) > MAX_LINE:
            raise ValueError(f"{device.name}: NVML description line {line!r} is too long or has a line break")
    return lines
