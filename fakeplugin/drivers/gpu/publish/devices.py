"""Inventory + node → the node's GPU devices (pure).

Identity is derived, never random, so the same inventory and node give the same devices after a
restart: UUIDs from SHA-256(node name, minor) (122+ bits, unique across nodes for any practical
fleet); PCI addresses from a per-node 16-bit PCI domain (derived from the node name, as Hyper-V
style VMs show arbitrary domains) and a fixed table of bus numbers typical of 8-GPU servers. GPUs
beyond the 8th use the next domains. Distinct node names collide on a domain with probability
about 1/65536 per pair; UUIDs do not collide in practice.

What a GPU publishes (kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0, cmd/gpu-kubelet-plugin/nvlib.go
GetPerGpuAllocatableDevices, deviceinfo.go, mig.go):
- MIG mode off: the full GPU `gpu-<minor>`;
- MIG mode on (`mig:` in the inventory, static MIG): its MIG devices, never the full GPU;
- DynamicMIG on a MIG-capable GPU: every MIG profile at every placement as a partition consuming the
  GPU's counter set; Hopper and later also the full GPU, consuming all of it; Ampere only once MIG mode
  is on (it cannot toggle MIG mode without a reset), else the plain full GPU;
- PassthroughSupport, on a GPU without MIG devices: also its VFIO device `gpu-vfio-<n>`, `n` its position
  among the node's GPUs in PCI address order (go-nvlib nvpci GetGPUs sorts by address; v25.12.0 and v0.4.1
  nvlib.go enumerateGpuVfioDevices, getVfioDeviceInfo; deviceinfo.go `VfioDeviceInfo.CanonicalName`).

A VFIO device's identity (v0.4.1 nvlib.go getVfioDeviceInfo, go-nvlib pkg/nvpci nvpci.go and resources.go):
`uuid` = UUIDv5(NameSpaceDNS, PCI bus ID); the profile's PCI device id and its pci.ids name (`UNKNOWN_DEVICE`
where the database has none, as nvpci reports it); addressable memory = the 64-bit BARs summed and rounded up
to a power of two (GetTotalAddressableMemory(true)): BAR1 (the profile's bar1MemoryMiB, else the framebuffer
rounded up to a power of two, the usual data-centre sizing: unverified per model) plus a 32 MiB BAR3. What a
host decides and fakeplugin fixes, deterministic per GPU: IOMMU group `IOMMU_GROUP_BASE + n` (the host's
other PCI devices hold the lower groups), iommufd cdev `vfio<n>` (the kernel numbers them in binding order),
and the host has /dev/iommu (IOMMUFD enabled).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import fields, replace

from fakeplugin.inventory import GpuEntry, Inventory, NodeEntry
from fakeplugin.mig import canonical_name, counter_set_name, mig_uuid
from fakeplugin.model import VFIO_NAME_PREFIX, CounterSet, GpuDevice, MigPlacement, MigResources, VfioFunction
from fakeplugin.profiles import ARCHITECTURES, MigCapability, MigProfile, Profile

# Bus numbers of the GPUs of a typical dual-socket 8-GPU server; each sits under a root port
# on the bus just below it (0000:3b:00.0 → pcieRoot pci0000:3a).
_BUSES = (0x1B, 0x3B, 0x5E, 0x86, 0xAF, 0xD8, 0x2C, 0x4E)
_MIB = 1024 * 1024
# Hopper and later toggle MIG mode without a GPU reset (the driver's supportsMIGModeToggle).
_TOGGLES_MIG = frozenset(ARCHITECTURES[ARCHITECTURES.index("Hopper") :])
IOMMU_GROUP_BASE = 64  # the IOMMU group of VFIO device n is this + n
_BAR3_BYTES = 32 * _MIB
UNKNOWN_PCI_DEVICE = "UNKNOWN_DEVICE"  # go-nvlib nvpci UnknownDeviceString


def devices_for_node(
    inv: Inventory, entry: NodeEntry, node_name: str, *, dynamic_mig: bool = False, passthrough: bool = False
) -> list[GpuDevice]:
    """The devices `node_name` publishes for `entry`'s GPUs (gpu-0..gpu-(n-1) in inventory order), each
    GPU's devices in turn: the full GPU, its MIG devices, or with `dynamic_mig` (the DynamicMIG gate) its
    partitions; with `passthrough` (the PassthroughSupport gate) a GPU without MIG devices is followed by
    its VFIO device (see the module docstring). ValueError names the entry when they cannot be made."""
    gpus: list[tuple[GpuDevice, GpuEntry]] = []
    for gpu in entry.gpus:
        for _ in range(gpu.count):
            gpus.append((_device(inv, entry, gpu, node_name, minor=len(gpus)), gpu))
    _check_unique([d for d, _ in gpus], [g.path for _, g in gpus], node_name)
    gpus = _with_gpu_memory_numa_nodes(entry, gpus)
    order = sorted(range(len(gpus)), key=lambda i: _pci_order(gpus[i][0].pci_bus_id))
    position = {minor: n for n, minor in enumerate(order)}
    devices: list[GpuDevice] = []
    for full, gpu in gpus:
        devices += _published(full, gpu, node_name, dynamic_mig)
        if passthrough and gpu.mig is None:
            devices.append(vfio_device(full, gpu.profile, position[full.minor]))
    return devices


def _pci_order(bus_id: str) -> int:
    """nvpci's sort key: the address's hex digits as one number."""
    return int(bus_id.replace(":", "").replace(".", ""), 16)


def vfio_device(full: GpuDevice, profile: Profile, index: int) -> GpuDevice:
    """The VFIO device of the full GPU `full` (a GPU of `profile`), the `index`-th GPU in PCI order."""
    bar1 = profile.smi.bar1_memory_mib * _MIB if profile.smi.bar1_memory_mib else _pow2(full.memory_bytes)
    function = VfioFunction(
        index=index,
        device_id=profile.pci_device_id,
        device_name=profile.pci_device_name or UNKNOWN_PCI_DEVICE,
        iommu_group=IOMMU_GROUP_BASE + index,
        iommufd=f"vfio{index}",
        iommufd_enabled=True,
        addressable_memory_bytes=_pow2(bar1 + _BAR3_BYTES),
    )
    return replace(
        full,
        name=f"{VFIO_NAME_PREFIX}{index}",
        type="vfio",
        uuid=str(uuid.uuid5(uuid.NAMESPACE_DNS, full.pci_bus_id)),
        product_name=function.device_name,
        vfio=function,
    )


def _pow2(n: int) -> int:
    """The least power of two ≥ n (go-nvlib calcNextPowerOf2)."""
    return 1 << (n - 1).bit_length()


def _with_gpu_memory_numa_nodes(
    entry: NodeEntry, gpus: list[tuple[GpuDevice, GpuEntry]]
) -> list[tuple[GpuDevice, GpuEntry]]:
    """GPUs whose memory is NUMA nodes of their own (a profile's `smi.gpuNumaNodes`, Grace-Blackwell), on a
    node whose CPU NUMA nodes are known: each GPU's nodes follow the CPUs' and the earlier GPUs' in minor
    order, `topo -m` shows the first as its GPU NUMA ID, and every GPU's NUMA Affinity is its CPU's node
    plus the other nodes of each such GPU on that CPU node. As a GB200 tray's `topo -m` shows them
    (sgl-project/sglang#11208: GPU NUMA ID 2, 10, 18; NUMA Affinity 0,3-9,11-17 and 1,19-25,27-33)."""
    if entry.numa_nodes is None:
        return gpus
    first: dict[int, int] = {}  # minor → its first memory node
    following = entry.numa_nodes
    for full, gpu in gpus:
        if gpu.profile.smi.gpu_numa_nodes:
            first[full.minor] = following
            following += gpu.profile.smi.gpu_numa_nodes
    if not first:
        return gpus
    result = []
    for full, gpu in gpus:
        numa = full.board.numa_affinity
        extra = [
            _range(first[d.minor] + 1, first[d.minor] + g.profile.smi.gpu_numa_nodes - 1)
            for d, g in gpus
            if d.minor in first and d.board.numa_affinity == numa and g.profile.smi.gpu_numa_nodes > 1
        ]
        board = replace(full.board, numa_affinity=",".join([numa, *extra]))
        if full.minor in first:
            board = replace(board, gpu_numa_id=str(first[full.minor]))
        result.append((replace(full, board=board), gpu))
    return result


def _range(low: int, high: int) -> str:
    return f"{low}-{high}" if high > low else str(low)


def gpu_uuid(node_name: str, minor: int) -> str:
    """Deterministic NVML-style UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, lower-case hex."""
    h = hashlib.sha256(f"fakeplugin/uuid/{node_name}/{minor}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def pci_bus_id(node_name: str, minor: int) -> str:
    """Deterministic PCI address in the attribute's form, e.g. 7c1e:3b:00.0."""
    base = int.from_bytes(hashlib.sha256(f"fakeplugin/pci/{node_name}".encode()).digest()[:2], "big")
    domain = (base + minor // len(_BUSES)) % 0x10000
    return f"{domain:04x}:{_BUSES[minor % len(_BUSES)]:02x}:00.0"


def pcie_root(bus_id: str) -> str:
    """sysfs root of a PCI address: the root bus just below the GPU's bus, or bus 00 for a GPU
    sitting directly on a root bus (VMs: 0000:00:06.0 → pci0000:00, as in the H200 capture)."""
    domain, bus = bus_id.split(":")[:2]
    return f"pci{domain}:{max(int(bus, 16) - 1, 0):02x}"


def _device(inv: Inventory, node: NodeEntry, gpu: GpuEntry, node_name: str, minor: int) -> GpuDevice:
    bus_id = gpu.pci_bus_id or pci_bus_id(node_name, minor)
    numa = numa_node(node, gpu, minor)
    board = replace(
        gpu.profile.board(ecc=gpu.ecc, memory_bytes=gpu.memory_bytes),
        cpu_affinity=cpu_list(node, numa),
        # NUMA unknown: the H200 captures (sysfs -1, one NUMA node) show NUMA Affinity 0.
        numa_affinity=str(numa or 0),
        fabric=node.fabric,  # every GPU of the node, and its MIG devices with the board
    )
    return GpuDevice(
        name=f"gpu-{minor}",
        type="gpu",
        minor=minor,
        index=minor,
        uuid=gpu.uuid or gpu_uuid(node_name, minor),
        product_name=gpu.product_name,
        brand=gpu.profile.brand,
        architecture=gpu.profile.architecture,
        cuda_compute_capability=gpu.profile.cuda_compute_capability,
        driver_version=inv.driver_version,
        cuda_driver_version=inv.cuda_driver_version,
        memory_bytes=gpu.memory_bytes,
        pci_bus_id=bus_id,
        pcie_root=pcie_root(bus_id),
        addressing_mode=gpu.profile.addressing_mode,
        profile=gpu.profile.name,
        board=board,
        numa_node=numa,
    )


def numa_node(node: NodeEntry, gpu: GpuEntry, minor: int) -> int | None:
    """The NUMA node of GPU `minor` of `node` (one of `gpu`'s): its numaNode, else spread evenly in minor
    order; None when the node's NUMA layout is unknown."""
    if node.numa_nodes is None:
        return None
    if gpu.numa_node is not None:
        return gpu.numa_node
    return minor * node.numa_nodes // max(node.gpu_count, 1)


def cpu_list(node: NodeEntry, numa: int | None) -> str:
    """The CPUs of NUMA node `numa` of `node` in Linux's list form (`0-15`); every CPU for None (unknown
    NUMA)."""
    per_node = node.cpus // (node.numa_nodes or 1)
    first = 0 if numa is None else numa * per_node
    last = node.cpus - 1 if numa is None else first + per_node - 1
    return _range(first, last)


def _published(full: GpuDevice, gpu: GpuEntry, node_name: str, dynamic_mig: bool) -> list[GpuDevice]:
    capability = gpu.profile.mig
    if dynamic_mig and capability is not None:
        with_full = full.architecture in _TOGGLES_MIG
        if not with_full and gpu.mig is None:
            return [full]
        unknown = [p.name for p in capability.profiles if p.memory_mib is None]
        if unknown:
            raise ValueError(
                f"{gpu.path} on node {node_name}: profile {gpu.profile.name} knows no real memory size of "
                f"its MIG profiles ({', '.join(unknown)}), so DynamicMIG cannot publish its partitions"
            )
        counters = _counter_set(full.minor, capability)
        partitions = [
            _mig_device(full, p, start, uuid="", counter_set=counters)
            for p in capability.profiles
            for start in p.placement_starts
        ]
        return ([replace(full, counter_set=counters)] if with_full else []) + partitions
    if gpu.mig is not None:
        return [
            _mig_device(
                full,
                m.profile,
                m.start,
                uuid=mig_uuid(full.uuid, m.profile.gi_profile_id, m.start),
                counter_set=None,
            )
            for m in gpu.mig
        ]
    return [full]


def _resources(profile: MigProfile) -> MigResources:
    assert profile.memory_mib is not None  # checked by the callers (config for static MIG, _published)
    return MigResources(
        multiprocessors=profile.multiprocessors,
        copy_engines=profile.copy_engines,
        decoders=profile.decoders,
        encoders=profile.encoders,
        jpeg_engines=profile.jpeg_engines,
        ofa_engines=profile.ofa_engines,
        memory_bytes=profile.memory_mib * _MIB,
    )


def _counter_set(minor: int, capability: MigCapability) -> CounterSet:
    """Per capacity the maximum over the GPU's MIG profiles; as many memory slices as the largest
    placement spans (the driver's inspectMigProfilesAndPlacements)."""
    each = [_resources(p) for p in capability.profiles]
    maxima = {f.name: max(getattr(r, f.name) for r in each) for f in fields(MigResources)}
    return CounterSet(
        name=counter_set_name(minor),
        resources=MigResources(**maxima),
        memory_slices=max(p.placement_size for p in capability.profiles),
    )


def _mig_device(
    parent: GpuDevice, profile: MigProfile, start: int, *, uuid: str, counter_set: CounterSet | None
) -> GpuDevice:
    """A MIG device on `parent`: the parent's identity attributes, the profile's resources."""
    placement = MigPlacement(
        profile=profile.name,
        gi_profile_id=profile.gi_profile_id,
        start=start,
        size=profile.placement_size,
        resources=_resources(profile),
    )
    return replace(
        parent,
        name=canonical_name(parent.minor, profile.name, profile.gi_profile_id, start),
        type="mig",
        uuid=uuid,
        memory_bytes=placement.resources.memory_bytes,
        parent_uuid=parent.uuid,
        mig=placement,
        counter_set=counter_set,
    )


def _check_unique(devices: list[GpuDevice], paths: list[str], node_name: str) -> None:
    # An override can coincide with a derived value; two devices sharing an identity would break
    # the pool (the scheduler and nvidia-smi both key on them).
    for attr, field in (("uuid", "uuid"), ("pci_bus_id", "pciBusID")):
        seen: dict[str, str] = {}
        for dev, path in zip(devices, paths, strict=True):
            value = getattr(dev, attr)
            if value in seen:
                raise ValueError(
                    f"{path} on node {node_name}: {dev.name} has the {field} of {seen[value]} ({value}); "
                    f"override {field} with another value"
                )
            seen[value] = dev.name
