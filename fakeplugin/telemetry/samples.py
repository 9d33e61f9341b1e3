"""One node's GPUs at one moment → dcgm-exporter's series (pure), as the release chosen
(telemetry.exporters) renders them.

What NVIDIA/dcgm-exporter 4.5.3-4.8.2 does, and where (paths in that repository; later releases differ as
exporters.py says):
- entities (`devicemonitoring/device_monitoring.go`, the default `-d f`, flex): a GPU without MIG devices
  is one entity; a GPU with MIG devices is its GPU instances only (the parent has no series of its own);
  GPUs in index order, a GPU's instances after each other (we order them by GPU instance ID [U]);
- labels (`collector/gpu_collector.go` `toMetric`, `rendermetrics/render_metrics.go`): `gpu` and `device`
  (`nvidia<N>`) are DCGM's GPU ID, the NVML index; `UUID` the GPU's (a GPU instance's: its parent's);
  `pci_bus_id` NVML's form `00000000:3B:00.0`; `modelName` the product name; GPU instances add
  `GPU_I_PROFILE` (the profile) and `GPU_I_ID` (NVML's GPU instance ID); `Hostname` (`hostname` from
  4.6.0-4.8.3: the node's name, as `hostname/hostname.go` takes NODE_NAME); every `label` counter (e.g.
  `DCGM_FI_DRIVER_VERSION`) as a label named by its field; then attributes: `err_code`, `err_msg` on
  `DCGM_FI_DEV_XID_ERRORS` (`xidErrCodeToText`, xid-messages.txt here) and the DRA attribution;
- values: DCGM's int64 fields as `%d`, doubles (`DCGM_FI_DEV_POWER_USAGE`, the `DCGM_FI_PROF_*` ratios)
  as `%f`; a field DCGM reports blank has no series (`skipDCGMValue`).
- DRA attribution: telemetry.attribution.

What a GPU shows (the load model, docs/telemetry.md): every value is a function of the device's load
(fakeplugin.telemetry.load), so an idle allocated GPU looks exactly like an unallocated one; idle values are
the fake nvidia-smi's (prepare/smi.py `gpu_values`: temperature, power as IDLE_POWER_FRACTION of the limit,
framebuffer total and reserved, no memory used).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources

from fakeplugin.drivers.gpu import smi
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.mig import gpu_instance_id, memory_slices
from fakeplugin.model import GpuDevice
from fakeplugin.telemetry import expfmt
from fakeplugin.telemetry.attribution import Use, dra_attribution
from fakeplugin.telemetry.counters import Counter
from fakeplugin.telemetry.exporters import FABRIC_HEALTH_FIELD_IDS, ExporterRelease, exporter_release
from fakeplugin.telemetry.fabrichealth import fabric_health
from fakeplugin.telemetry.load import IDLE, Load, busiest

_MIB = 1024 * 1024
# DCGM fields whose type is double (DCGM_FT_DOUBLE), printed `%f`: power and the DCP ratios 1001..1008.
# [U] from DCGM's field documentation and real exporter output (dcgm-exporter #512, gpu-monitoring-tools
# #189 show `167.362000`, `0.000000`); DCGM's field table itself is not in go-dcgm.
_DOUBLE_FIELDS = frozenset(range(1001, 1009)) | {155}
# Profiling (DCP) metrics: Volta and newer datacenter GPUs (the default CSV's "supported on Nvidia
# datacenter Volta GPUs and newer"; dcgm-exporter #395: "Volta or newer is required"). By architecture,
# datacenter by brand (NVML's Nvidia/Tesla brands; RTX and Quadro workstation boards have none) [U].
_DCP_ARCHITECTURES = frozenset({"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"})
_DATACENTER_BRANDS = frozenset({"Nvidia", "Tesla"})
# Row remapping came with Ampere (NVML nvmlDeviceGetRemappedRows: Ampere and newer) [U] per board.
_ROW_REMAP_ARCHITECTURES = frozenset({"Ampere", "Ada Lovelace", "Hopper", "Blackwell"})
# (idle SM, max SM, memory) clocks in MHz where a capture shows them: tests/data/nvidia-smi-h200/smi_q.txt
# (Clocks, Max Clocks). Other models' clocks are unknown: their clock series are left out (DCGM blank).
_CLOCKS_MHZ = {"h200": (345, 1980, 3201)}
# The load model (docs/telemetry.md, "The load model"): at 100 % utilization.
FULL_POWER_FRACTION = 0.95  # of the power limit
FULL_TEMPERATURE_RISE_C = 45  # 33 °C idle → 78 °C
MEM_COPY_SHARE = 0.5  # memory-copy utilization per percent of SM utilization
TENSOR_SHARE = 0.4  # tensor pipe active per unit of graphics engine active
PCIE_FULL_BYTES_PER_SECOND = 4_000_000_000  # host traffic at full load, each direction


@dataclass(frozen=True)
class NodeState:
    """What one node's series are made of, read at one moment: `devices` and `faults` from one
    NodeDevices state, `loads` by device name, `energy_mj` by entity (`entity_key_of`)."""

    hostname: str
    devices: Sequence[GpuDevice]
    faults: Mapping[str, DeviceFault] = field(default_factory=dict)
    uses: Sequence[Use] = ()
    loads: Mapping[str, Load] = field(default_factory=dict)
    energy_mj: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Entity:
    """A DCGM entity the exporter monitors: a GPU (`gpu`), or a GPU instance (`gpu` its MIG device, whose
    identity fields are its parent's; `gi_id` NVML's GPU instance ID)."""

    gpu: GpuDevice
    gi_id: int | None = None

    @property
    def uuid(self) -> str:
        """The `UUID` label: the physical GPU's."""
        return (self.gpu.parent_uuid or self.gpu.uuid) if self.gi_id is not None else self.gpu.uuid

    @property
    def key(self) -> str:
        """The series' ID for attribution (collector/types.go GetIDOfType, gpu-uuid)."""
        return self.uuid if self.gi_id is None else f"{self.gpu.index}-{self.gi_id}"


# counter → its series in order, each (labels, attributes, value, order): the label text inside the braces in
# two parts, the entity's labels (shared by all its series) and its attributes (`,k="v"`..., shared by the
# series of one attribution entry), so a fleet's hundreds of thousands of series share their strings;
# `order` the sample's place in its family where the release sorts them (expfmt.label_signature), else "".
Series = dict[Counter, list[tuple[str, str, str, str]]]


def entities(devices: Iterable[GpuDevice]) -> list[Entity]:
    """The monitored entities in the exporter's order (flex mode)."""
    by_index: dict[int, list[GpuDevice]] = {}
    for device in devices:
        by_index.setdefault(device.index, []).append(device)
    out: list[Entity] = []
    for index in sorted(by_index):
        created = [d for d in by_index[index] if d.mig is not None and d.uuid]  # DynamicMIG: "" until made
        if created:
            out += sorted((Entity(d, gpu_instance_id(d)) for d in created), key=lambda e: e.gi_id or 0)
        else:
            out += [Entity(d) for d in by_index[index] if d.type == "gpu"]
    return out


def entity_key_of(entity: Entity) -> str:
    """The key energy is kept by: the GPU's UUID, a GPU instance's `<uuid>/<gi>`."""
    return entity.uuid if entity.gi_id is None else f"{entity.uuid}/{entity.gi_id}"


def power_watts(device: GpuDevice, load: Load) -> float | None:
    """The board's draw under `load`; None where the profile knows no power limit (nvidia-smi: N/A)."""
    limit = device.board.power_limit_watts
    if limit is None:
        return None
    share = smi.IDLE_POWER_FRACTION + (FULL_POWER_FRACTION - smi.IDLE_POWER_FRACTION) * load.utilization / 100
    return limit * share


def temperature_c(gpu: Load) -> int:
    """The GPU's temperature under its physical GPU's load `gpu`."""
    return smi.IDLE_TEMPERATURE_C + FULL_TEMPERATURE_RISE_C * gpu.utilization // 100


def framebuffer_mib(device: GpuDevice, load: Load, *, gpu_instance: bool) -> tuple[int, int, int]:
    """(used, free, reserved) MiB: a GPU's total less its reserve (nvidia-smi's Total, Reserved) is used plus
    free; a GPU instance has its profile's memory and no reserve [U]."""
    if gpu_instance:
        total, reserved = device.memory_bytes // _MIB, 0
    else:
        total, reserved = device.board.memory_bytes // _MIB, device.board.reserved_memory_mib or 0
    usable = max(total - reserved, 0)
    used = usable * load.memory // 100
    return used, usable - used, reserved


def entity_powers(devices: Iterable[GpuDevice], loads: Mapping[str, Load]) -> dict[str, float]:
    """Each entity's power draw now (`entity_key_of`), for the energy counter a host integrates."""
    listed = list(devices)
    found = entities(listed)
    loads = folded_loads(listed, loads)
    out: dict[str, float] = {}
    for entity in found:
        power = power_watts(entity.gpu, _gpu_load(entity, loads, found))
        if power is not None:
            out[entity_key_of(entity)] = power
    return out


def dcp_supported(device: GpuDevice) -> bool:
    return device.architecture in _DCP_ARCHITECTURES and device.brand in _DATACENTER_BRANDS


def folded_loads(devices: Iterable[GpuDevice], loads: Mapping[str, Load]) -> dict[str, Load]:
    """`loads` with each DynamicMIG partition's (not yet a GPU instance: it has no UUID) added to its GPU's:
    work on a partition is work on the GPU, whose series stand for it."""
    listed = list(devices)
    gpus = {d.index: d.name for d in listed if d.type == "gpu"}
    out = dict(loads)
    for device in listed:
        parent = gpus.get(device.index)
        if device.mig is not None and not device.uuid and device.name in loads and parent is not None:
            out[parent] = busiest([out.get(parent), loads[device.name]]) or IDLE
    return out


def physical_loads(devices: Iterable[GpuDevice], loads: Mapping[str, Load]) -> dict[int, Load]:
    """Each physical GPU's load by index (`loads` folded: `folded_loads`), as its entities' series show it."""
    found = entities(devices)
    return {entity.gpu.index: _gpu_load(entity, loads, found) for entity in found}


def _gpu_load(entity: Entity, loads: Mapping[str, Load], siblings: Sequence[Entity]) -> Load:
    """The load of the physical GPU: its own, or its instances' weighted by their memory slices."""
    if entity.gi_id is None:
        return loads.get(entity.gpu.name, IDLE)
    total = 0
    memory = 0
    for other in siblings:
        if other.gi_id is not None and other.gpu.index == entity.gpu.index and other.gpu.mig is not None:
            load = loads.get(other.gpu.name, IDLE)
            total += load.utilization * other.gpu.mig.size
            memory += load.memory * other.gpu.mig.size
    slices = memory_slices(entity.gpu)
    return Load(min(total // slices, 100), min(memory // slices, 100))


def values(
    entity: Entity,
    own: Load,
    gpu: Load,
    fault: DeviceFault | None,
    energy_mj: int,
    *,
    fabric: bool = False,
) -> dict[int, str]:
    """DCGM field ID → value as the exporter prints it, for every field fakeplugin simulates on this
    entity; `own`: the entity's load, `gpu`: the physical GPU's (the same for a GPU); `fabric`: with the
    fabric health fields (telemetry.fabrichealth)."""
    device, instance = entity.gpu, entity.gi_id is not None
    out: dict[int, float | int] = {}
    clocks = _CLOCKS_MHZ.get(device.profile)
    if clocks is not None:
        idle_sm, max_sm, memory_clock = clocks
        out[100] = max_sm if gpu.utilization else idle_sm  # DCGM_FI_DEV_SM_CLOCK: boost under any load
        out[101] = memory_clock  # DCGM_FI_DEV_MEM_CLOCK
    temperature = temperature_c(gpu)
    out[140] = temperature  # DCGM_FI_DEV_MEMORY_TEMP [U]: the capture's HBM reads as the GPU
    out[150] = temperature  # DCGM_FI_DEV_GPU_TEMP
    power = power_watts(device, gpu)
    if power is not None:
        out[155] = power  # DCGM_FI_DEV_POWER_USAGE
        out[156] = energy_mj  # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    out[202] = 0  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
    if not instance:  # *_UTIL are not supported on GPU instances (dcgm-exporter #105, #430)
        out[203] = own.utilization  # DCGM_FI_DEV_GPU_UTIL
        out[204] = round(own.utilization * MEM_COPY_SHARE)  # DCGM_FI_DEV_MEM_COPY_UTIL
        out[206] = 0  # DCGM_FI_DEV_ENC_UTIL
        out[207] = 0  # DCGM_FI_DEV_DEC_UTIL
    out[230] = fault.xid if fault is not None and fault.xid is not None else 0  # DCGM_FI_DEV_XID_ERRORS
    used, free, reserved = framebuffer_mib(device, own, gpu_instance=instance)
    out[251], out[252] = free, used  # DCGM_FI_DEV_FB_FREE, _USED
    if not instance:
        out[253] = reserved  # DCGM_FI_DEV_FB_RESERVED
    if device.architecture in _ROW_REMAP_ARCHITECTURES:
        out[393] = out[394] = out[395] = 0  # remapped rows (uncorrectable, correctable), remap failure
    if device.board.nvlinks:
        out[449] = 0  # DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL: no NVLink traffic is simulated
    if fabric and not instance:  # [U] none on GPU instances: the fabric is the physical GPU's
        out |= fabric_health(device)
    out[526] = 0  # DCGM_FI_DEV_VGPU_LICENSE_STATUS: not a licensed vGPU [U]
    if dcp_supported(device):
        active = own.utilization / 100
        out[1001] = active  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
        out[1002] = active  # DCGM_FI_PROF_SM_ACTIVE
        out[1004] = active * TENSOR_SHARE  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
        out[1005] = round(own.utilization * MEM_COPY_SHARE) / 100  # DCGM_FI_PROF_DRAM_ACTIVE
        out[1009] = out[1010] = PCIE_FULL_BYTES_PER_SECOND * own.utilization // 100  # PCIE_TX/RX_BYTES
    return {i: f"{v:f}" if i in _DOUBLE_FIELDS else f"{int(v)}" for i, v in out.items()}


# Every DCGM field ID `values` can give (on some board); the others of a counters file make no series.
SIMULATED_FIELD_IDS = frozenset(
    {100, 101, 140, 150, 155, 156, 202, 203, 204, 206, 207, 230, 251, 252, 253, 393, 394, 395, 449, 526}
    | {1001, 1002, 1004, 1005, 1009, 1010}
)
LABEL_FIELDS = {
    "DCGM_FI_DRIVER_VERSION": lambda d: d.driver_version,
    "DCGM_FI_DEV_NAME": lambda d: d.product_name,
    "DCGM_FI_DEV_UUID": lambda d: _physical_uuid(d),
    "DCGM_FI_DEV_SERIAL": lambda d: smi.serial_number(_physical_uuid(d)),
}


def _physical_uuid(device: GpuDevice) -> str:
    return (device.parent_uuid or device.uuid) if device.mig is not None else device.uuid


def is_simulated(counter: Counter, release: ExporterRelease) -> bool:
    """Whether `counter` can have series under `release` (the fabric health fields from 4.6.1-4.8.4)."""
    if counter.field_id in FABRIC_HEALTH_FIELD_IDS:
        return release.fabric_health
    return counter.field_id in SIMULATED_FIELD_IDS or (counter.is_label and counter.field in LABEL_FIELDS)


@functools.cache
def xid_messages() -> tuple[str, ...]:
    text = resources.files(__package__).joinpath("xid-messages.txt").read_text(encoding="utf-8")
    rows = [line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#")]
    return tuple(message for _, message in rows)


def xid_attributes(value: str) -> dict[str, str]:
    """`err_code` and `err_msg` of an XID value (gpu_collector.go toMetric)."""
    code = int(value)
    messages = xid_messages()
    return {
        "err_code": str(code),
        "err_msg": messages[code] if 0 <= code < len(messages) else "Unknown Error",
    }


def _labels(counters: Sequence[Counter], fields: Mapping[int, str], device: GpuDevice) -> dict[str, str]:
    """The `label` counters' labels: a simulated field's value, or the device's identity string."""
    out: dict[str, str] = {}
    for counter in counters:
        if counter.field_id in fields:
            out[counter.field] = fields[counter.field_id]
        elif counter.field in LABEL_FIELDS:
            out[counter.field] = LABEL_FIELDS[counter.field](device)
    return out


DEFAULT_EXPORTER = exporter_release(None)


def node_series(
    state: NodeState,
    counters: Sequence[Counter],
    into: Series | None = None,
    *,
    release: ExporterRelease = DEFAULT_EXPORTER,
    pod_uid: bool = False,
) -> Series:
    """The node's series per counter as `release` renders them, appended to `into` (a fleet's nodes one
    after another); `pod_uid`: the exporter's --kubernetes-enable-pod-uid."""
    series: Series = {} if into is None else into
    metrics = sorted(c for c in counters if not c.is_label)
    labels = [c for c in counters if c.is_label]
    attribution = dra_attribution(
        state.devices, state.uses, state.hostname, release, _instance_key, pod_uid=pod_uid
    )
    found = entities(state.devices)
    loads = folded_loads(state.devices, state.loads)
    for entity in found:
        device = entity.gpu
        own = loads.get(device.name, IDLE)
        fault = state.faults.get(device.name)  # a GPU instance: its MIG device's entry
        energy = state.energy_mj.get(entity_key_of(entity), 0)
        fields = values(
            entity, own, _gpu_load(entity, loads, found), fault, energy, fabric=release.fabric_health
        )
        base = [
            ("gpu", str(device.index)),
            ("UUID", entity.uuid),
            ("pci_bus_id", smi.nvml_bus_id(device.pci_bus_id)),
            ("device", f"nvidia{device.index}"),
            ("modelName", device.product_name),
        ]
        if entity.gi_id is not None and device.mig is not None:
            base += [("GPU_I_PROFILE", device.mig.profile), ("GPU_I_ID", str(entity.gi_id))]
        base.append((release.hostname_label, state.hostname))
        base += sorted(_labels(labels, fields, device).items())
        prefix = ",".join(f'{k}="{v}"' for k, v in base)
        entries = attribution.get(entity.key) or [{}]
        suffixes = [(_text(who), _order(release, base, who)) for who in entries]
        for counter in metrics:
            value = fields.get(counter.field_id)
            if value is None:
                continue
            shown = expfmt.go_float(value) if release.expfmt else value
            append = series.setdefault(counter, []).append
            if counter.field_id == 230:  # attributes of its own, sorted among the attribution's
                for who in entries:
                    attributes = xid_attributes(value) | who
                    append((prefix, _text(attributes), shown, _order(release, base, attributes)))
                continue
            for suffix, order in suffixes:
                append((prefix, suffix, shown, order))
    return series


def _order(release: ExporterRelease, labels: list[tuple[str, str]], attributes: Mapping[str, str]) -> str:
    return expfmt.label_signature([*labels, *attributes.items()]) if release.expfmt else ""


def _instance_key(device: GpuDevice) -> str:
    """A MIG device's GPU instance's series ID (deviceinfo/device_info.go GetGPUInstanceIdentifier)."""
    return f"{device.index}-{gpu_instance_id(device)}"


def _text(attributes: Mapping[str, str]) -> str:
    """Attributes as the template writes them: `,k="v"` each, sorted by key."""
    return "".join(f',{k}="{v}"' for k, v in sorted(attributes.items()))
