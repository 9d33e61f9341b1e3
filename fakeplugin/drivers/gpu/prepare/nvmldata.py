"""The description the mock NVML library (fakeplugin/nvml) reads in a container: one file per device the
container got, `<DESCRIPTION_CONTAINER_DIR>/<device>.nvml`, rendered from the device model (pure), and the
files Prepare writes on the host, `<plugin_dir>/nvml/<claimUID>-<device>.nvml` (one flat directory, as
the fake nvidia-smi's data files: written before the claim's CDI spec that mounts them, removed after it),
and the library itself, installed at `<plugin_dir>/lib/libnvidia-ml.so.1` when the plugin starts.

One file per device, as the fake nvidia-smi's data files, so each device's CDI edits can mount its own
and a container sees exactly the devices of its requests. The values come from the same places as the
fake nvidia-smi's (`smi.py`) and the ResourceSlices': the device model, its profile's board, `smi`'s
serial, bus ID form and idle readings, `fakeplugin.mig`'s GPU instance IDs; a test holds NVML and
nvidia-smi equal. A full GPU's file has its `[gpu]` section; a MIG device's its parent GPU's, in MIG
mode, then its `[mig]` section. The library lists them as nvidia-smi does: one GPU per minor, in minor
order, NVML indices 0..n-1 (a container's NVML counts from 0, whatever the host's index), MIG devices
under their GPU in placement order. The format is the one `fakeplugin/nvml/description.c` reads
(docs/emulation.md, "NVML in the container").

Prepare links each claim file to the device's copy in `nvml/devices/<device>.nvml` (written when the
device's text changed: the first Prepare of a device, a DynamicMIG partition's new UUID), which is cheaper
than writing a new file per claim. Each device has a live directory, `nvml/live/<device>/` (mounted at
`<device>.live/` next to its description in the container), where fakeplugin.telemetry.nvmllive keeps its
live state (`state`: load-model readings, XID, lost); Prepare only makes it, once per device: without a
state NVML answers the idle values.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from fakeplugin.atomicfile import write_atomic
from fakeplugin.drivers.gpu.prepare.smi import (
    DATA_MODE,
    IDLE_POWER_FRACTION,
    IDLE_TEMPERATURE_C,
    mount,
    nvml_bus_id,
    serial_number,
)
from fakeplugin.mig import gpu_instance_id
from fakeplugin.model import GpuDevice
from fakeplugin.nvml import DESCRIPTION_CONTAINER_DIR
from fakeplugin.nvml.build import LIBRARY_NAME
from fakeplugin.profiles import BRANDS, NVML_ARCHITECTURES, load_profile

FORMAT = 1
MAX_LINE = 255  # description.c reads lines of at most 255 bytes, their newline aside
_SUFFIX = ".nvml"  # description.c reads the files of this suffix
_LIVE_SUFFIX = ".live"  # description.c: the live directory of `<name>.nvml` is `<name>.live`
LIVE_STATE = "state"  # the file in it
_DEVICES = "devices"  # each device's description, the claims' files are links to
_LIVE = "live"  # each device's live directory
_UID_LENGTH = 36  # a claim UID, as the API server makes it: a UUID's canonical form
_MIB = 1024 * 1024
_NVIDIA_VENDOR = 0x10DE
LIBRARY_MODE = 0o755  # as a distribution installs shared libraries
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


def gpu_section(device: GpuDevice, mig_mode: bool) -> dict[str, str]:
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


def mig_section(device: GpuDevice) -> dict[str, str]:
    """The `[mig]` keys of a MIG device."""
    assert device.mig is not None
    return {
        "name": f"{device.product_name} MIG {device.mig.profile}",  # as NVML names MIG devices
        "uuid": device.uuid,
        "memory_total": str(device.memory_bytes),
        "gpu_instance_id": str(gpu_instance_id(device)),
        "compute_instance_id": str(_COMPUTE_INSTANCE_ID),
        "placement_start": str(device.mig.start),
    }


def file_name(device_name: str) -> str:
    """The name of a device's description file."""
    return f"{device_name}{_SUFFIX}"


def render_device(device: GpuDevice) -> str:
    """The description file of `device` as Prepare hands it out (a DynamicMIG partition created:
    `fakeplugin.mig.created_for_claim`). ValueError names a device it cannot describe."""
    if not device.uuid:
        raise ValueError(f"{device.name}: a DynamicMIG partition has no UUID before Prepare creates it")
    lines = [
        f"# fakeplugin: the NVML description of {device.name}",
        f"format={FORMAT}",
        f"driver_version={device.driver_version}",
        f"nvml_version={nvml_version(device)}",
        f"cuda_driver_version={nvml_cuda_version(device.cuda_driver_version)}",
        "[gpu]",
        *_lines(device, gpu_section(device, mig_mode=device.mig is not None)),
    ]
    if device.mig is not None:
        lines += ["[mig]", *_lines(device, mig_section(device))]
    return "\n".join(lines) + "\n"


def _lines(device: GpuDevice, values: dict[str, str]) -> list[str]:
    lines = [f"{key}={value}" for key, value in values.items()]
    for line in lines:
        if "\n" in line or "\r" in line or len(line.encode()) > MAX_LINE:
            raise ValueError(f"{device.name}: NVML description line {line!r} is too long or has a line break")
    return lines


# -- CDI edits ---------------------------------------------------------------------------------------------


def library_container_paths(machine: str | None = None) -> tuple[str, ...]:
    """Where containers find the library by name without ldconfig (NVIDIA's toolkit runs its
    update-ldcache hook; we run none): Debian's and Ubuntu's glibc search `/usr/lib/<arch>-linux-gnu`
    (`ld.so --list-diagnostics`: path.system_dirs), Red Hat's `/usr/lib64`, where NVIDIA's own mock NVML
    (NVIDIA/k8s-test-infra nvml-mock) mounts it. `machine`: `platform.machine()` of the node's host."""
    multiarch = f"{machine or platform.machine()}-linux-gnu"
    return (f"/usr/lib/{multiarch}/{LIBRARY_NAME}", f"/usr/lib64/{LIBRARY_NAME}")


def data_dir(plugin_dir: Path) -> Path:
    return plugin_dir.absolute() / "nvml"


def installed_library(plugin_dir: Path) -> Path:
    """The library as the plugin installs it (`install_library`), the host path of its CDI mounts: under the
    plugin dir, which the chart's plugin container shares with its node at the same path (the runtime
    reads a CDI mount's host path on the node; the image's copy is inside the plugin's container)."""
    return plugin_dir.absolute() / "lib" / LIBRARY_NAME


def claim_data_path(plugin_dir: Path, claim_uid: str, device_name: str) -> Path:
    """A claim's device's description file on the host (one flat directory, as nvidia-smi's data)."""
    return data_dir(plugin_dir) / f"{claim_uid}-{file_name(device_name)}"


def device_data_path(plugin_dir: Path, device_name: str) -> Path:
    """A device's description file on the host, which its claims' files are links to."""
    return data_dir(plugin_dir) / _DEVICES / file_name(device_name)


def live_root(plugin_dir: Path) -> Path:
    """The directory of the devices' live directories, one per device by name."""
    return data_dir(plugin_dir) / _LIVE


def live_dir(plugin_dir: Path, device_name: str) -> Path:
    return live_root(plugin_dir) / device_name


def written_dirs(plugin_dir: Path) -> list[Path]:
    """Every directory files are written into atomically (prepare.stale removes a killed writer's temp
    files there): the claims', the devices' descriptions', the library's, each live directory."""
    try:
        lives = sorted(e.path for e in os.scandir(live_root(plugin_dir)) if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        lives = []
    library_dir = installed_library(plugin_dir).parent
    return [data_dir(plugin_dir), data_dir(plugin_dir) / _DEVICES, library_dir, *map(Path, lives)]


def spec_mounts(library: Path, machine: str | None = None) -> list[dict[str, Any]]:
    """Spec-level CDI mounts: the library, read-only, at each of `library_container_paths`."""
    return [mount(library, path) for path in library_container_paths(machine)]


def device_mounts(plugin_dir: Path, claim_uid: str, device: GpuDevice) -> list[dict[str, Any]]:
    """Device-level CDI mounts: the device's description file, into the directory the library reads, and
    its live directory beside it."""
    in_container = f"{DESCRIPTION_CONTAINER_DIR}/{file_name(device.name)}"
    live = f"{DESCRIPTION_CONTAINER_DIR}/{device.name}{_LIVE_SUFFIX}"
    return [
        mount(claim_data_path(plugin_dir, claim_uid, device.name), in_container),
        mount(live_dir(plugin_dir, device.name), live),
    ]


# -- files -------------------------------------------------------------------------------------------------


def install_library(plugin_dir: Path, library: Path) -> Path:
    """Copy the built `library` to `installed_library` (atomically: a container set up meanwhile mounts the
    old or the new one; one running keeps the one it has); returns that path. OSError names the file."""
    path = installed_library(plugin_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, library.read_bytes(), mode=LIBRARY_MODE, sync=False)  # rewritten at every start
    return path


def write_claim_data(plugin_dir: Path, claim_uid: str, devices: Sequence[GpuDevice]) -> None:
    """Give each of the claim's devices its description file, a link to the device's (each written
    atomically, and replaced, never changed: a container never reads half a file, one that runs keeps the
    text it started with, and a killed writer leaves a temp file prepare.stale removes), and its live
    directory."""
    for device in devices:
        # Lives for one boot, like the CDI spec that mounts it.
        text = render_device(device).encode()
        source = device_data_path(plugin_dir, device.name)
        if not _holds(source, text):
            source.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(source, text, mode=DATA_MODE, sync=False)
        target = claim_data_path(plugin_dir, claim_uid, device.name)
        try:
            os.link(source, target)
        except FileExistsError:  # prepared again (a Prepare that died midway): replaced, as before
            write_atomic(target, text, mode=DATA_MODE, sync=False)
        live = live_dir(plugin_dir, device.name)
        if not live.is_dir():
            live.mkdir(mode=0o755, parents=True, exist_ok=True)


def _holds(path: Path, text: bytes) -> bool:
    try:
        return path.read_bytes() == text
    except FileNotFoundError:
        return False


def claim_data_present(plugin_dir: Path, claim_uid: str, device_names: Iterable[str]) -> bool:
    return all(claim_data_path(plugin_dir, claim_uid, name).is_file() for name in device_names)


def remove_claim_data(plugin_dir: Path, claim_uid: str, device_names: Iterable[str]) -> None:
    """Remove the description files of the claim's `device_names` (the devices' own and their live
    directories stay, for their next claims); nothing there is fine."""
    for name in device_names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claim_data_path(plugin_dir, claim_uid, name))


def orphans(plugin_dir: Path, claims: Collection[str]) -> list[Path]:
    """The description files of claims other than `claims` (UIDs): `<claimUID>-<device>.nvml` files whose
    UID is not one of them. Temp files (prepare.stale) and other names are not ours to judge."""
    try:
        names = sorted(os.listdir(data_dir(plugin_dir)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        data_dir(plugin_dir) / name
        for name in names
        if name.endswith(_SUFFIX)
        and name[36:37] == "-"
        and not name.startswith(".")
        and name[:36] not in claims
    ]
