"""The fake `nvidia-smi` every container with our GPUs gets: script and program, per-GPU data, CDI mounts.

Layout (host → container, all mounts `[ro, nosuid, nodev, rbind, rprivate]` like the real driver's):
- `<plugin_dir>/bin/nvidia-smi` → `/usr/bin/nvidia-smi`: one static POSIX-sh script (`nvidia-smi.sh` in this
  package) that parses the options, and `<plugin_dir>/bin/nvidia-smi.awk` → `/usr/bin/nvidia-smi.awk`: the
  POSIX awk program it runs to print, found next to the script. Both written atomically when the Preparer
  starts; mounted by every claim spec's spec-level edits (the CDI library keeps one mount per container
  path, so several claims in one container are fine).
- `<plugin_dir>/smi/<claimUID>-<device>.env` → `/run/fakeplugin/gpus/<device>.env`: one data file per
  allocated GPU, mounted by that device's edits, so a container sees exactly the GPUs of the requests it
  got. Device names are unique on a node, so container paths never clash. Written before the claim's CDI
  spec, removed after it. One flat directory: a directory per claim cost Unprepare an rmdir, 0.6 to 0.7 ms on
  ext4, more than the Go test driver's whole Unprepare (docs/benchmarks.md, issue 32). Claims prepared by
  an earlier fakeplugin keep their `smi/<claimUID>/` directory until they are unprepared
  (`remove_claim_data`).

A data file is `key=value` lines, values preformatted as nvidia-smi prints them (`gpu_values`). Values
NVML would measure (temperature, power draw, utilisation) are simulated idle readings; `N/A` where our
profiles know no value (VBIOS, clocks). The compute mode follows the device's opaque-config settings
(`compute_mode`), as the real driver sets it when it prepares the claim. The `fabric_*` keys are the GPU's
fabric info (`fabric_values`): the node's multi-node NVLink fabric (the inventory's `nodes[].fabric`), else
what its model reports outside one (the profile's `smi.fabric`), the node's `fakeplugin.dev/fabric-state`
fault applied; none where that is unknown.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fakeplugin.atomicfile import write_atomic
from fakeplugin.drivers.gpu.prepare import opaqueconfig
from fakeplugin.model import FABRIC_HEALTH_ROWS, Board, DeviceSettings, GpuDevice

SCRIPT_CONTAINER_PATH = "/usr/bin/nvidia-smi"
PROGRAM_NAME = "nvidia-smi.awk"
# The script runs `${0%/*}/nvidia-smi.awk`: the program sits next to it in the container as on the host.
PROGRAM_CONTAINER_PATH = f"/usr/bin/{PROGRAM_NAME}"
DATA_CONTAINER_DIR = "/run/fakeplugin/gpus"
MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "rbind", "rprivate")  # the real driver's CDI mounts
TEST_ROOT_ENV = "FAKEPLUGIN_SMI_ROOT"  # read by the script; tests only: prefix of DATA_CONTAINER_DIR
SCRIPT_MODE = 0o755
PROGRAM_MODE = 0o644  # read by awk, never executed
DATA_MODE = 0o644

IDLE_TEMPERATURE_C = 33  # the H200 capture's idle GPU 0
IDLE_POWER_FRACTION = 0.12  # idle draw as a share of the power limit (H200 capture: 83 W of 700 W)
IDLE_BAR1_USED_MIB = 1  # both H200 captures, idle
PERSISTENCE_MODE = "Enabled"  # GPU nodes run nvidia-persistenced (the H200 capture: On)

# go-nvlib brand (ResourceSlice attribute) → nvidia-smi's "Product Brand". `Nvidia` → `NVIDIA` is seen in
# the H200 capture; the others follow NVML's brand names.
_BRANDS = {
    "Unknown": "Unknown",
    "Quadro": "Quadro",
    "Tesla": "Tesla",
    "NVS": "NVS",
    "Grid": "Grid",
    "GeForce": "GeForce",
    "Titan": "Titan",
    "NvidiaVApps": "NVIDIA Virtual Applications",
    "NvidiaVPC": "NVIDIA Virtual PC",
    "NvidiaVCS": "NVIDIA Virtual Compute Server",
    "NvidiaVWS": "NVIDIA RTX Virtual Workstation",
    "NvidiaCloudGaming": "NVIDIA Cloud Gaming",
    "QuadroRTX": "Quadro RTX",
    "NvidiaRTX": "NVIDIA RTX",
    "Nvidia": "NVIDIA",
    "GeForceRTX": "GeForce RTX",
    "TitanRTX": "Titan RTX",
}
_MIB = 1024 * 1024
_NVIDIA_VENDOR = "10DE"


@functools.cache  # package data: the same for the life of the process
def script_text() -> str:
    """The script as shipped in this package."""
    return (
        resources.files("fakeplugin.drivers.gpu.prepare")
        .joinpath("nvidia-smi.sh")
        .read_text(encoding="utf-8")
    )


@functools.cache
def program_text() -> str:
    """The script's awk program as shipped in this package."""
    return (
        resources.files("fakeplugin.drivers.gpu.prepare").joinpath(PROGRAM_NAME).read_text(encoding="utf-8")
    )


def script_path(plugin_dir: Path) -> Path:
    return plugin_dir.absolute() / "bin" / "nvidia-smi"


def program_path(plugin_dir: Path) -> Path:
    return script_path(plugin_dir).with_name(PROGRAM_NAME)


def data_dir(plugin_dir: Path) -> Path:
    return plugin_dir.absolute() / "smi"


def claim_data_path(plugin_dir: Path, claim_uid: str, device_name: str) -> Path:
    return data_dir(plugin_dir) / f"{claim_uid}-{data_file_name(device_name)}"


def data_file_name(device_name: str) -> str:
    """The name a device's data file has in containers."""
    return f"{device_name}.env"


# -- pure: values and CDI edits ----------------------------------------------------------------------------


def nvml_bus_id(pci_bus_id: str) -> str:
    """The attribute form `0000:3b:00.0` as NVML prints it: `00000000:3B:00.0` (8-digit domain, upper)."""
    domain, rest = pci_bus_id.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def serial_number(uuid: str) -> str:
    """A stable 13-digit board serial (real ones look like `1653724058250`), derived from the UUID."""
    digits = int(hashlib.sha256(f"fakeplugin/serial/{uuid}".encode()).hexdigest(), 16) % 10**12
    return f"1{digits:012d}"


def compute_mode(device: GpuDevice, settings: DeviceSettings | None) -> str:
    """nvidia-smi's compute mode of `device` once the real driver applied its opaque-config settings: MPS
    sets EXCLUSIVE_PROCESS on the full GPUs of the config (never on a MIG device's parent); time-slicing sets
    DEFAULT, which is also every GPU's mode without one."""
    mps = settings is not None and settings.strategy == opaqueconfig.MPS
    return "Exclusive_Process" if device.type == "gpu" and mps else "Default"


def gpu_values(device: GpuDevice, settings: DeviceSettings | None = None) -> dict[str, str]:
    """What the script prints for `device` under its opaque-config settings (`compute_mode`); `N/A` where
    the profile gives no real value.

    A MIG device's file describes its parent GPU (nvidia-smi lists physical GPUs) plus `mig_*` keys for the
    MIG line under it; the script shows a GPU once however many of its MIG devices a container got.
    """
    board = device.board
    uuid = device.parent_uuid if device.mig is not None and device.parent_uuid else device.uuid
    limit = board.power_limit_watts
    subsystem = board.pci_subsystem_id
    bar1 = board.bar1_memory_mib
    values = {
        "minor": str(device.minor),
        "uuid": uuid,
        "name": device.product_name,
        "brand": _BRANDS[device.brand],
        "architecture": device.architecture,
        "bus_id": nvml_bus_id(device.pci_bus_id),
        "pci_device_id": f"0x{board.pci_device_id:04X}{_NVIDIA_VENDOR}",
        "pci_subsystem_id": "N/A" if subsystem is None else f"0x{subsystem:04X}{_NVIDIA_VENDOR}",
        "driver_version": device.driver_version,
        "cuda_version": device.cuda_driver_version,
        "compute_cap": device.cuda_compute_capability,
        "serial": serial_number(uuid),
        "vbios_version": "N/A",
        "persistence_mode": PERSISTENCE_MODE,
        "addressing_mode": device.addressing_mode or "N/A",
        "ecc_mode": "Enabled" if board.ecc else "Disabled",
        "mig_mode": "N/A" if not board.mig_capable else "Enabled" if device.mig is not None else "Disabled",
        "memory_total_mib": str(board.memory_bytes // _MIB),
        "memory_reserved_mib": str(board.reserved_memory_mib or 0),
        "memory_used_mib": "0",
        "bar1_total_mib": "N/A" if bar1 is None else str(bar1),
        "bar1_used_mib": "N/A" if bar1 is None else str(IDLE_BAR1_USED_MIB),
        "compute_mode": compute_mode(device, settings),
        "utilization_pct": "0",
        "pstate": "P0",
        "temperature_c": str(IDLE_TEMPERATURE_C),
        "power_limit_w": "N/A" if limit is None else f"{limit:.2f}",
        "power_draw_w": "N/A" if limit is None else f"{limit * IDLE_POWER_FRACTION:.2f}",
        "clocks_sm_mhz": "N/A",
        "clocks_max_sm_mhz": "N/A",
        # `topo -m`: the PCIe and NUMA placement (numa_node as the slice attribute has it; N/A when the
        # attribute is omitted), NVLinks to peers of the same model.
        "pcie_root": device.pcie_root or "N/A",
        "numa_node": "N/A" if device.numa_node is None else str(device.numa_node),
        "cpu_affinity": board.cpu_affinity,
        "numa_affinity": board.numa_affinity,
        "gpu_numa_id": board.gpu_numa_id,
        "nvlinks": str(board.nvlinks),
    }
    values |= fabric_values(board)
    if device.mig is not None:
        values |= {
            "mig_uuid": device.uuid,
            "mig_profile": device.mig.profile,
            "mig_start": str(device.mig.start),
        }
    return values


def fabric_values(board: Board) -> dict[str, str]:
    """The `fabric_*` keys: NVML's GPU fabric info as `-q`'s Fabric section prints it (every Health row a
    `fabric_health_<row>` key). The GPU's fabric (`Board.reported_fabric`) is the node's multi-node NVLink
    fabric, else its model's registration outside one (the profile's `smi.fabric`: CliqueId 0, the zero
    ClusterUUID), with the node's fabric-state fault applied (fakeplugin.faults.fabricfaults). Registered
    (the GB200 capture, NVIDIA/k8s-test-infra qx-gb200.xml; the H200 capture): the clique and the profile's
    Health rows. Before Completed the clique and health are N/A (NVIDIA/gpu-operator#2511's "In Progress"
    report); [U] a completed registration with an error keeps its clique, its health N/A. A model whose
    fabric info is not supported reports every row N/A; no keys where the model's report is unknown (and
    the node has no fabric)."""
    report = board.fabric_report
    fabric = board.reported_fabric
    if fabric is None and report is None:
        return {}
    if fabric is None:
        rows = ("N/A",) * 4
    else:
        completed = fabric.state == "Completed"
        rows = (
            fabric.state,
            fabric.status,
            str(fabric.clique) if completed else "N/A",
            fabric.cluster_uuid if completed else "N/A",
        )
    health = dict(report.health) if report is not None and fabric is not None and fabric.registered else {}
    keys = ("fabric_state", "fabric_status", "fabric_clique_id", "fabric_cluster_uuid")
    return dict(zip(keys, rows, strict=True)) | {
        f"fabric_health_{row}": health.get(row, "N/A") for row in FABRIC_HEALTH_ROWS
    }


def render_data(device: GpuDevice, settings: DeviceSettings | None = None) -> str:
    """The data file of `device` under its opaque-config settings."""
    values = gpu_values(device, settings)
    for key, value in values.items():
        # One line per key: the script splits lines at the first "=".
        if "\n" in value or "\r" in value:
            raise ValueError(f"{device.name}: nvidia-smi value {key}={value!r} contains a line break")
    lines = [f"# fakeplugin nvidia-smi data of {device.name}", *(f"{k}={v}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


def mount(host_path: Path, container_path: str) -> dict[str, Any]:
    """A read-only bind mount of a host file, with the real driver's options."""
    return {"hostPath": str(host_path), "containerPath": container_path, "options": list(MOUNT_OPTIONS)}


def spec_mounts(plugin_dir: Path) -> list[dict[str, Any]]:
    """Spec-level CDI mounts: the script, then its awk program."""
    return [
        mount(script_path(plugin_dir), SCRIPT_CONTAINER_PATH),
        mount(program_path(plugin_dir), PROGRAM_CONTAINER_PATH),
    ]


def with_program_mount(mounts: Any) -> list[Any] | None:
    """Spec-level `mounts` of an earlier fakeplugin version, whose script was self-contained, with the awk
    program's mount added after the script's (the host file next to the script's, the same options); None
    when there is nothing to add: no script of ours mounted, or its program already is."""
    if not isinstance(mounts, list):
        return None
    targets = [m.get("containerPath") if isinstance(m, Mapping) else None for m in mounts]
    if SCRIPT_CONTAINER_PATH not in targets or PROGRAM_CONTAINER_PATH in targets:
        return None
    at = targets.index(SCRIPT_CONTAINER_PATH)
    script = mounts[at]
    if not isinstance(script.get("hostPath"), str):
        return None  # not a spec of ours: validation has the last word
    program = copy.deepcopy(dict(script))
    program["hostPath"] = str(Path(script["hostPath"]).with_name(PROGRAM_NAME))
    program["containerPath"] = PROGRAM_CONTAINER_PATH
    return [*mounts[: at + 1], program, *mounts[at + 1 :]]


def device_mounts(plugin_dir: Path, claim_uid: str, device: GpuDevice) -> list[dict[str, Any]]:
    """Device-level CDI mounts: the device's data file."""
    in_container = f"{DATA_CONTAINER_DIR}/{data_file_name(device.name)}"
    return [mount(claim_data_path(plugin_dir, claim_uid, device.name), in_container)]


# -- files -------------------------------------------------------------------------------------------------


def install_program(plugin_dir: Path) -> Path:
    """Write (or replace) the script's awk program under `plugin_dir`; returns its path. Before the script
    (`install_script`): an installed script always finds its program."""
    path = program_path(plugin_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, program_text().encode(), mode=PROGRAM_MODE, sync=False)  # rewritten at every start
    return path


def install_script(plugin_dir: Path) -> Path:
    """Write (or replace) the script under `plugin_dir`; returns its path. Its program must be installed
    (`install_program`). A container set up between the two may get the new program with an earlier
    script: one that was self-contained ignores it; a later one must pass the same variables to awk."""
    path = script_path(plugin_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, script_text().encode(), mode=SCRIPT_MODE, sync=False)  # rewritten at every start
    return path


def write_claim_data(
    plugin_dir: Path,
    claim_uid: str,
    devices: Sequence[GpuDevice],
    settings: Mapping[str, DeviceSettings] = MappingProxyType({}),
) -> None:
    """Write the data file of each of the claim's devices; `settings`: device name → what its opaque config
    applied (devices without settings left out)."""
    data_dir(plugin_dir).mkdir(parents=True, exist_ok=True)
    for device in devices:
        data = render_data(device, settings.get(device.name))
        # Lives for one boot, like the CDI spec that mounts it.
        write_atomic(
            claim_data_path(plugin_dir, claim_uid, device.name), data.encode(), mode=DATA_MODE, sync=False
        )


def claim_data_present(plugin_dir: Path, claim_uid: str, device_names: Iterable[str]) -> bool:
    return all(claim_data_path(plugin_dir, claim_uid, name).is_file() for name in device_names)


def remove_claim_data(plugin_dir: Path, claim_uid: str, device_names: Iterable[str]) -> None:
    """Remove the claim's data files (those of `device_names`, and the directory an earlier fakeplugin
    wrote them in); nothing there is fine."""
    for name in device_names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(claim_data_path(plugin_dir, claim_uid, name))
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(data_dir(plugin_dir) / claim_uid)
