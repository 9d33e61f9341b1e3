"""GPU models as data: one `<name>.yaml` per profile next to this file, loaded into frozen types.

A new GPU model is one data file. Values are as NVML reports them on real hardware; each file says
where its values come from (`source:`) and what is unknown (`notes:`). Unknown values are left out,
never guessed: such fields are None here. A required value no real output gives (the engine counts of
a MIG profile nobody has listed yet) is the closest model's and marked `[U]` in the file.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fakeplugin.model import FABRIC_HEALTH_ROWS, Board, FabricReport
from fakeplugin.yamlschema import Problems, SchemaError, join, parse_yaml

# go-nvlib's brand and architecture strings (NVIDIA/go-nvlib pkg/nvlib/device/device.go, as vendored by
# kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0: NVML brand enum 0..16, architecture names; "Rubin" only
# from go-nvlib v0.12.0, commit 50f3b9b2 "add support for rendering Rubin arch string").
BRANDS = (
    "Unknown",
    "Quadro",
    "Tesla",
    "NVS",
    "Grid",
    "GeForce",
    "Titan",
    "NvidiaVApps",
    "NvidiaVPC",
    "NvidiaVCS",
    "NvidiaVWS",
    "NvidiaCloudGaming",
    "QuadroRTX",
    "NvidiaRTX",
    "Nvidia",
    "GeForceRTX",
    "TitanRTX",
)
ARCHITECTURES = (
    "Kepler",
    "Maxwell",
    "Pascal",
    "Volta",
    "Turing",
    "Ampere",
    "Ada Lovelace",
    "Hopper",
    "Blackwell",
    "Rubin",
)
# NVML's nvmlDeviceArchitecture_t of each (NVIDIA/go-nvml pkg/nvml const.go DEVICE_ARCH_*): the number a
# go-nvlib without the name prints in its error.
NVML_ARCHITECTURES = dict(zip(ARCHITECTURES, (2, 3, 4, 5, 6, 7, 8, 9, 10, 13), strict=True))
ADDRESSING_MODES = ("HMM", "ATS", "None")

_CC = re.compile(r"^\d+\.\d+$")
_HEX16 = re.compile(r"^0x[0-9a-f]{4}$")
_HEX24 = re.compile(r"^0x[0-9a-f]{6}$")
_MIB = 1024 * 1024
_NVLINKS_WHY = "NVLink 4 and 5, Hopper and Blackwell: 18 per GPU"
_GPU_NUMA_WHY = "Grace-Blackwell: 8 per GPU"


class ProfileError(SchemaError):
    """A profile data file is malformed (a bug in our package data)."""


class UnknownProfileError(LookupError):
    """No profile of that name; the message lists the known ones."""

    def __init__(self, name: str) -> None:
        super().__init__(f'unknown GPU profile "{name}" (known: {", ".join(profile_names())})')
        self.name = name


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile as `nvidia-smi mig -lgip` / NVML GetGpuInstanceProfileInfo show it."""

    name: str  # "1g.18gb"
    gi_profile_id: int  # the ID used in MIG device names and `-cgi`, not NVML's enum index
    slices: int
    instances: int
    memory_mib: int | None  # memorySizeMB; None where no real value is known
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placement_starts: tuple[int, ...]
    placement_size: int


@dataclass(frozen=True)
class MigCapability:
    memory_slices: int
    profiles: tuple[MigProfile, ...]


@dataclass(frozen=True)
class SmiValues:
    """Extra values the fake nvidia-smi prints; None where the references give nothing."""

    power_limit_watts: int | None = None
    reserved_memory_mib: int | None = None
    bar1_memory_mib: int | None = None
    pci_subsystem_id: int | None = None  # 16-bit subsystem device id, e.g. 0x18bf
    cuda_cores: int | None = None
    nvlinks: int = 0  # NVLinks between two GPUs of this model on one node (SXM boards); 0: PCIe only
    fabric: FabricReport | None = None  # `-q` Fabric section outside a multi-node NVLink domain
    # NUMA nodes of the GPU's own memory (coherent Grace-Blackwell memory), numbered after the CPUs'
    # and the earlier GPUs'; 0: none (`topo -m` GPU NUMA ID N/A).
    gpu_numa_nodes: int = 0


@dataclass(frozen=True)
class Profile:
    name: str  # file stem, e.g. "rtx-a5000"
    product_name: str  # nvmlDeviceGetName verbatim
    brand: str  # go-nvlib brand string
    architecture: str  # go-nvlib architecture string
    cuda_compute_capability: str  # "8.6"
    pci_device_id: int  # 16-bit PCI device id, e.g. 0x2231
    memory_ecc_on_bytes: int | None  # NVML memory.total with ECC enabled
    memory_ecc_off_bytes: int | None  # ... with ECC disabled
    ecc_default: bool
    addressing_mode: str | None  # None: NVML says NOT_SUPPORTED or unknown; the attribute is omitted
    mig: MigCapability | None  # None: not MIG capable
    smi: SmiValues
    source: str
    notes: str
    # PCI class code as sysfs `class` holds it (0x030200: 3D controller); None where no capture gives it.
    pci_class: int | None = None
    # The PCI ID database's name of pci_device_id (pci.ids, e.g. "GH100 [H100 SXM5 80GB]"): what go-nvlib's
    # nvpci reports as DeviceName and a VFIO device publishes as productName; None: not in the database.
    pci_device_name: str | None = None

    def memory_bytes(self, ecc: bool) -> int | None:
        """NVML memory.total in this ECC mode, None if no real value is known."""
        return self.memory_ecc_on_bytes if ecc else self.memory_ecc_off_bytes

    def board(self, *, ecc: bool, memory_bytes: int) -> Board:
        """A GPU of this model in this ECC mode with this memory.total, as nvidia-smi shows it."""
        return Board(
            ecc=ecc,
            memory_bytes=memory_bytes,
            pci_device_id=self.pci_device_id,
            pci_subsystem_id=self.smi.pci_subsystem_id,
            power_limit_watts=self.smi.power_limit_watts,
            reserved_memory_mib=self.smi.reserved_memory_mib,
            bar1_memory_mib=self.smi.bar1_memory_mib,
            mig_capable=self.mig is not None,
            nvlinks=self.smi.nvlinks,
            fabric_report=self.smi.fabric,
        )


def profile_names() -> list[str]:
    """Names of all shipped profiles, sorted."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


@functools.cache
def load_profile(name: str) -> Profile:
    """The profile `name`; UnknownProfileError lists the known names, ProfileError a broken file."""
    if name not in profile_names():
        raise UnknownProfileError(name)
    source = f"fakeplugin/profiles/{name}.yaml"
    text = resources.files(__name__).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return parse_profile(name, parse_yaml(text, source, ProfileError), source)


def parse_profile(name: str, data: Any, source: str) -> Profile:
    """Build a Profile from parsed YAML, reporting every problem at once."""
    p = Problems(source)
    m = p.mapping(
        data,
        "",
        required=(
            "source",
            "productName",
            "brand",
            "architecture",
            "cudaComputeCapability",
            "pciDeviceId",
            "memory",
            "eccDefault",
        ),
        optional=("addressingMode", "mig", "smi", "notes", "pciClass", "pciDeviceName"),
    )
    if m is None:
        raise ProfileError(p.lines)
    brand = _choice(p, m, "brand", BRANDS)
    arch = _choice(p, m, "architecture", ARCHITECTURES)
    addressing = _choice(p, m, "addressingMode", ADDRESSING_MODES)
    cc = p.string(m, "cudaComputeCapability", "")
    if cc is not None and not _CC.match(cc):
        p.add("cudaComputeCapability", f'must look like "8.6", got "{cc}"')
    device_id = _hex16(p, m, "pciDeviceId", "")
    pci_class = p.string(m, "pciClass", "") if "pciClass" in m else None
    if pci_class is not None and not _HEX24.match(pci_class):
        p.add("pciClass", f'must be 6 lower-case hex digits like "0x030200", got "{pci_class}"')
    ecc_default = p.boolean(m, "eccDefault", "")
    ecc_on = ecc_off = None
    mem = p.mapping(m["memory"], "memory", optional=("eccOn", "eccOff")) if "memory" in m else None
    if mem is not None:
        ecc_on = p.integer(mem, "eccOn", "memory", minimum=_MIB)
        ecc_off = p.integer(mem, "eccOff", "memory", minimum=_MIB)
        if ecc_default is not None and (ecc_on if ecc_default else ecc_off) is None:
            p.add(join("memory", "eccOn" if ecc_default else "eccOff"), "required for the default ECC mode")
    mig = _mig(p, m["mig"]) if "mig" in m else None
    smi = _smi(p, m["smi"]) if "smi" in m else SmiValues()
    product, src = p.string(m, "productName", ""), p.string(m, "source", "")
    notes = p.string(m, "notes", "") if "notes" in m else ""
    pci_name = p.string(m, "pciDeviceName", "") if "pciDeviceName" in m else None
    # Every field read as None above was reported, so from here on all required values are set.
    if not p.ok:
        raise ProfileError(p.lines)
    return Profile(
        name=name,
        product_name=product,
        brand=brand,
        architecture=arch,
        cuda_compute_capability=cc,
        pci_device_id=device_id,
        memory_ecc_on_bytes=ecc_on,
        memory_ecc_off_bytes=ecc_off,
        ecc_default=ecc_default,
        addressing_mode=addressing,
        mig=mig,
        smi=smi,
        source=src,
        notes=notes,
        pci_class=int(pci_class, 16) if pci_class and _HEX24.match(pci_class) else None,
        pci_device_name=pci_name,
    )


def _choice(p: Problems, m: dict[str, Any], key: str, allowed: tuple[str, ...], path: str = "") -> str | None:
    value = p.string(m, key, path)
    if value is not None and value not in allowed:
        p.add(join(path, key), f'must be one of {", ".join(allowed)}; got "{value}"')
        return None
    return value


def _hex16(p: Problems, m: dict[str, Any], key: str, path: str) -> int | None:
    value = p.string(m, key, path)
    if value is not None and not _HEX16.match(value):
        p.add(join(path, key), f'must be 4 lower-case hex digits like "0x2231", got "{value}"')
        return None
    return int(value, 16) if value is not None else None


_MIG_COUNTS = (
    "slices",
    "instances",
    "multiprocessors",
    "copyEngines",
    "decoders",
    "encoders",
    "jpegEngines",
    "ofaEngines",
    "placementSize",
)


def _mig(p: Problems, raw: Any) -> MigCapability | None:
    m = p.mapping(raw, "mig", required=("memorySlices", "profiles"))
    if m is None:
        return None
    slices = p.integer(m, "memorySlices", "mig", minimum=1)
    profiles = []
    for i, item in enumerate(p.sequence(m, "profiles", "mig") or []):
        path = f"mig.profiles[{i}]"
        pm = p.mapping(
            item, path, required=("name", "giProfileId", "placements", *_MIG_COUNTS), optional=("memoryMiB",)
        )
        if pm is None:
            continue
        counts = {k: p.integer(pm, k, path, minimum=0) for k in _MIG_COUNTS}
        starts = p.sequence(pm, "placements", path) or []
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in starts):
            p.add(join(path, "placements"), "must be a list of slice indexes (integers >= 0)")
        profiles.append(
            MigProfile(
                name=p.string(pm, "name", path),
                gi_profile_id=p.integer(pm, "giProfileId", path, minimum=0),
                memory_mib=p.integer(pm, "memoryMiB", path, minimum=1),
                slices=counts["slices"],
                instances=counts["instances"],
                multiprocessors=counts["multiprocessors"],
                copy_engines=counts["copyEngines"],
                decoders=counts["decoders"],
                encoders=counts["encoders"],
                jpeg_engines=counts["jpegEngines"],
                ofa_engines=counts["ofaEngines"],
                placement_starts=tuple(starts),
                placement_size=counts["placementSize"],
            )
        )
    return MigCapability(memory_slices=slices, profiles=tuple(profiles))


# `smi.fabric.state`: NVML's fabric state of a GPU outside a multi-node NVLink domain, as `-q` prints it.
FABRIC_STATES = ("Completed", "N/A")
# `smi.fabric.health` keys (camelCase of the fabric.health.* query fields) → FABRIC_HEALTH_ROWS.
_HEALTH_KEYS = {
    "".join(w.title() if i else w for i, w in enumerate(row.split("_"))): row for row in FABRIC_HEALTH_ROWS
}


def _fabric(p: Problems, raw: Any) -> FabricReport | None:
    m = p.mapping(raw, "smi.fabric", required=("state",), optional=("health",))
    if m is None:
        return None
    state = _choice(p, m, "state", FABRIC_STATES, "smi.fabric")
    health = p.string_map(m, "health", "smi.fabric") if "health" in m else {}
    if health is None or state is None:
        return None
    for key in health.keys() - _HEALTH_KEYS.keys():
        p.add(join("smi.fabric.health", key), f"unknown row (known: {', '.join(_HEALTH_KEYS)})")
    if health and state == "N/A":
        p.add("smi.fabric.health", "a GPU whose fabric state is N/A reports every health row N/A")
    rows = tuple((_HEALTH_KEYS[k], health[k]) for k in _HEALTH_KEYS if k in health)
    return FabricReport(registered=state == "Completed", health=rows)


def _smi(p: Problems, raw: Any) -> SmiValues:
    ints = ("powerLimitWatts", "reservedMemoryMiB", "bar1MemoryMiB", "cudaCores", "nvlinks", "gpuNumaNodes")
    m = p.mapping(raw, "smi", optional=(*ints, "pciSubsystemId", "fabric"))
    if m is None:
        return SmiValues()
    return SmiValues(
        power_limit_watts=p.integer(m, "powerLimitWatts", "smi", minimum=1),
        reserved_memory_mib=p.integer(m, "reservedMemoryMiB", "smi", minimum=0),
        bar1_memory_mib=p.integer(m, "bar1MemoryMiB", "smi", minimum=1),
        pci_subsystem_id=_hex16(p, m, "pciSubsystemId", "smi") if "pciSubsystemId" in m else None,
        cuda_cores=p.integer(m, "cudaCores", "smi", minimum=1),
        nvlinks=p.integer(m, "nvlinks", "smi", minimum=1, maximum=18, why=_NVLINKS_WHY) or 0,
        fabric=_fabric(p, m["fabric"]) if "fabric" in m else None,
        gpu_numa_nodes=p.integer(m, "gpuNumaNodes", "smi", minimum=1, maximum=16, why=_GPU_NUMA_WHY) or 0,
    )
