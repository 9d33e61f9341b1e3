"""Devices → `resource.k8s.io/v1` ResourceSlice objects (pure), shaped as NVIDIA's driver publishes them.

Rules (kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0 cmd/gpu-kubelet-plugin/driver.go publishResources,
generateSplitResourceSlices; kubernetes/dynamic-resource-allocation v0.35.0
resourceslice/resourceslicecontroller.go; the limits of kubernetes/api v0.35.0 resource/v1/types.go):
- one pool per node, named after the node; `generateName` as the release's k8s libraries make it
  (fakeplugin.releases: `<node>-<driver>-` for 25.12, `<index in 5 hex digits>-<driver>-<node>-` for
  0.4.1); owned by the Node;
- a slice holds at most 128 devices, 64 once any device in it has taints or consumesCounters;
  a pool split over several slices gives each `resourceSliceCount` = number of slices;
- a node without devices publishes no slice at all (the real driver only runs on GPU nodes, so a
  GPU-less pool never appears in `kubectl get resourceslices`);
- DynamicMIG (devices consuming counters), with the 1.35 rule that one slice never holds both devices
  and sharedCounters: first the counter sets of all GPUs (at most 8 per slice), then each GPU's devices
  in slices of their own (at most 64 per slice), GPUs sorted by PCI bus ID, devices by name. Against an
  API server before 1.35 the driver publishes the combined layout instead: per GPU one slice with its
  counter set and its devices. It picks by the server's version (dra-driver-nvidia-gpu
  cmd/gpu-kubelet-plugin/driver.go `shouldUseSplitResourceSlices`: < 1.35.0 → combined); so do we.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from fakeplugin import consumableshares, releases
from fakeplugin.mig import camel_to_dns_name, memory_slice_counter
from fakeplugin.model import GpuDevice, MigResources
from fakeplugin.quantity import format_binary_si
from fakeplugin.releases import DriverRelease
from fakeplugin.resourceslices import pool_slices, split_devices

MAX_COUNTER_SETS = 8  # sharedCounters per slice (1.35+)
SPLIT_COUNTERS_SINCE = (1, 35)
NVIDIA_PCI_VENDOR = 0x10DE  # (major, minor) of the first API server wanting counters in own slices


def semver(version: str) -> str:
    """A dotted version as the driver's semver parse prints it: missing parts become 0 and leading
    zeros go (580.95.05 → 580.95.5, 13.0 → 13.0.0, 8.6 → 8.6.0)."""
    parts = [str(int(p)) for p in version.split(".")]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def device_to_api(
    dev: GpuDevice, release: DriverRelease | None = None, consumable_shares: str = consumableshares.DISABLED
) -> dict[str, Any]:
    """One device entry of a ResourceSlice, `{name, attributes, capacity[, consumesCounters]}` (v25.12.0):
    a full GPU; a MIG device (the parent's identity, `parentUUID`, `profile`, the profile's resources and,
    static MIG only, one `memorySlice<i>` per memory slice it holds); a DynamicMIG partition (no `uuid`
    until created) or full GPU, consuming counters of the GPU's counter set. Only the attributes `release`
    (default: the default release) publishes; numaNode as a one-element list with its DRAListTypeAttributes
    gate (`DriverRelease.with_gates`). `consumable_shares`: the plugin's mode (fakeplugin.
    consumableshares.parse); any but `disabled` adds `allowMultipleAllocations` and request policies.
    A VFIO device: `vfio_to_api`."""
    if dev.vfio is not None:
        return vfio_to_api(dev, release or releases.get(None))
    attributes: dict[str, dict[str, Any]] = {"type": {"string": dev.type}}
    if dev.uuid:
        attributes["uuid"] = {"string": dev.uuid}
    if dev.mig is not None:
        attributes["parentUUID"] = {"string": dev.parent_uuid or ""}
        attributes["profile"] = {"string": dev.mig.profile}
    attributes |= {
        "productName": {"string": dev.product_name},
        "brand": {"string": dev.brand},
        "architecture": {"string": dev.architecture},
        "cudaComputeCapability": {"version": semver(dev.cuda_compute_capability)},
        "driverVersion": {"version": semver(dev.driver_version)},
        "cudaDriverVersion": {"version": semver(dev.cuda_driver_version)},
        "resource.kubernetes.io/pciBusID": {"string": dev.pci_bus_id},
    }
    if dev.pcie_root is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": dev.pcie_root}
    release = release or releases.get(None)
    if dev.numa_node is not None:  # sysfs -1 (unknown): omitted (0.5.0-dev addNumaNodeAttribute)
        numa = {"ints": [dev.numa_node]} if release.list_type_attributes else {"int": dev.numa_node}
        attributes[releases.NUMA_NODE_ATTRIBUTE] = numa
    if dev.addressing_mode is not None:
        attributes["addressingMode"] = {"string": dev.addressing_mode}
    published = release.attributes
    attributes = {key: value for key, value in attributes.items() if key in published}
    device: dict[str, Any] = {"name": dev.name, "attributes": attributes}
    cs = dev.counter_set
    if dev.mig is not None:
        device["capacity"] = _capacity(dev.mig.resources)
        held = range(dev.mig.start, dev.mig.start + dev.mig.size)
        if cs is None:
            device["capacity"] |= {f"memorySlice{i}": {"value": "1"} for i in held}
    elif cs is not None:
        device["capacity"] = _capacity(cs.resources)
        held = range(cs.memory_slices)
    else:
        device["capacity"] = {"memory": {"value": format_binary_si(dev.memory_bytes)}}
    if cs is not None:
        counters = {camel_to_dns_name(name): dict(value) for name, value in device["capacity"].items()}
        counters |= {memory_slice_counter(i): {"value": "1"} for i in held}
        device["consumesCounters"] = [{"counterSet": cs.name, "counters": counters}]
    if consumable_shares != consumableshares.DISABLED:
        # After the counters, which keep the unrounded memory (partitions.go PartGetDevice).
        memory = dev.mig.resources if dev.mig is not None else cs.resources if cs is not None else None
        limit = consumableshares.memory_limit(memory.memory_bytes if memory else dev.memory_bytes)
        device = consumableshares.shape_device(device, consumable_shares, format_binary_si(limit))
    return device


def vfio_to_api(dev: GpuDevice, release: DriverRelease) -> dict[str, Any]:
    """A VFIO device's entry (deviceinfo.go `VfioDeviceInfo.GetDevice`: v25.12.0, v0.4.1, main 95932046):
    `numa` is sysfs numa_node (-1 unknown); `iommuFDEnabled` since v0.4.0 (with VfioDeviceConfig's `iommu`);
    main replaces `numa` by `resource.kubernetes.io/numaNode`, as a full GPU has it (commit d693b8a6).
    Never consumable shares (allocatable.go: VFIO passthrough devices do not support them)."""
    assert dev.vfio is not None
    attributes: dict[str, dict[str, Any]] = {
        "type": {"string": dev.type},
        "uuid": {"string": dev.uuid},
        "deviceID": {"string": f"0x{dev.vfio.device_id:04x}"},
        "vendorID": {"string": f"0x{NVIDIA_PCI_VENDOR:04x}"},
        "productName": {"string": dev.product_name},
        "resource.kubernetes.io/pciBusID": {"string": dev.pci_bus_id},
    }
    if releases.NUMA_NODE_ATTRIBUTE not in release.attributes:
        attributes["numa"] = {"int": -1 if dev.numa_node is None else dev.numa_node}
    if release.vfio_iommu_config:
        attributes["iommuFDEnabled"] = {"bool": dev.vfio.iommufd_enabled}
    if dev.pcie_root is not None:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": dev.pcie_root}
    if dev.numa_node is not None and releases.NUMA_NODE_ATTRIBUTE in release.attributes:
        numa = {"ints": [dev.numa_node]} if release.list_type_attributes else {"int": dev.numa_node}
        attributes[releases.NUMA_NODE_ATTRIBUTE] = numa
    memory = format_binary_si(dev.vfio.addressable_memory_bytes)
    return {"name": dev.name, "attributes": attributes, "capacity": {"addressableMemory": {"value": memory}}}


def _capacity(r: MigResources) -> dict[str, dict[str, str]]:
    """The driver's CommonCapacitiesMig, in its key order."""
    values = {
        "multiprocessors": r.multiprocessors,
        "copyEngines": r.copy_engines,
        "decoders": r.decoders,
        "encoders": r.encoders,
        "jpegEngines": r.jpeg_engines,
        "ofaEngines": r.ofa_engines,
        "memory": r.memory_bytes,
    }
    return {name: {"value": format_binary_si(v)} for name, v in values.items()}


def shared_counters(devices: Sequence[GpuDevice]) -> list[dict[str, Any]]:
    """The counter sets the devices consume, each once, in order of first use: per GPU its maxima and one
    counter per memory slice (the driver's PartSharedCounterSets)."""
    sets: dict[str, dict[str, Any]] = {}
    for dev in devices:
        cs = dev.counter_set
        if cs is not None and cs.name not in sets:
            counters = {camel_to_dns_name(k): v for k, v in _capacity(cs.resources).items()}
            counters |= {memory_slice_counter(i): {"value": "1"} for i in range(cs.memory_slices)}
            sets[cs.name] = {"name": cs.name, "counters": counters}
    return list(sets.values())


def _api(
    dev: GpuDevice, taints: Mapping[str, Sequence[dict[str, Any]]], release: DriverRelease | None, shares: str
) -> dict[str, Any]:
    device = device_to_api(dev, release, shares)
    if taints.get(dev.name):
        device["taints"] = [dict(t) for t in taints[dev.name]]
    return device


def partitionable_layout(
    devices: Sequence[GpuDevice],
    taints: Mapping[str, Sequence[dict[str, Any]]] = MappingProxyType({}),
    release: DriverRelease | None = None,
    shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """DynamicMIG slice contents (`{"sharedCounters": ...}` or `{"devices": ...}`), 1.35 rule: counter
    sets first, 8 a slice; then per GPU (sorted by PCI bus ID) its devices sorted by name, 64 a slice
    (the driver's generateSplitResourceSlices, which never has to split for up to 8 GPUs of 26 devices)."""
    by_gpu: dict[str, list[GpuDevice]] = {}
    for dev in devices:
        by_gpu.setdefault(dev.pci_bus_id, []).append(dev)
    gpus = [sorted(by_gpu[bus], key=lambda d: d.name) for bus in sorted(by_gpu)]
    sets = shared_counters([dev for gpu in gpus for dev in gpu])
    contents: list[dict[str, Any]] = [
        {"sharedCounters": sets[i : i + MAX_COUNTER_SETS]} for i in range(0, len(sets), MAX_COUNTER_SETS)
    ]
    for gpu in gpus:
        contents += [
            {"devices": chunk} for chunk in split_devices([_api(d, taints, release, shares) for d in gpu])
        ]
    return contents


def combined_layout(
    devices: Sequence[GpuDevice],
    taints: Mapping[str, Sequence[dict[str, Any]]] = MappingProxyType({}),
    release: DriverRelease | None = None,
    shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """DynamicMIG slice contents for API servers before 1.35: per GPU (sorted by PCI bus ID) one slice
    with that GPU's counter set and its devices sorted by name (the driver's
    generateCombinedResourceSlices)."""
    by_gpu: dict[str, list[GpuDevice]] = {}
    for dev in devices:
        by_gpu.setdefault(dev.pci_bus_id, []).append(dev)
    contents: list[dict[str, Any]] = []
    for bus in sorted(by_gpu):
        gpu = sorted(by_gpu[bus], key=lambda d: d.name)
        sets = shared_counters(gpu)  # none for a GPU without MIG: the key is left out (Go's omitempty)
        contents.append(
            {
                **({"sharedCounters": sets} if sets else {}),
                "devices": [_api(d, taints, release, shares) for d in gpu],
            }
        )
    return contents


def resource_slices(
    devices: Sequence[GpuDevice | dict[str, Any]],
    *,
    driver: str,
    node_name: str,
    node_uid: str,
    generation: int = 1,
    taints: Mapping[str, Sequence[dict[str, Any]]] = MappingProxyType({}),
    release: DriverRelease | None = None,
    server_version: tuple[int, int] = SPLIT_COUNTERS_SINCE,
    consumable_shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """The ResourceSlices of one node's pool, as the API server receives them on create.

    `devices` are GpuDevices (rendered with `device_to_api`) or already API-shaped device dicts,
    e.g. with taints or consumesCounters. Once a GpuDevice consumes counters (DynamicMIG), the pool
    takes `partitionable_layout`, which needs GpuDevices only. `taints`: device name → the taints of
    that GpuDevice (faults.devicefaults), set before the pool is split (a tainted device's slice
    holds at most 64). `release`: the emulated driver release (default: the default release).
    `server_version`: the API server's (major, minor); it picks the DynamicMIG layout.
    `consumable_shares`: the plugin's mode (fakeplugin.consumableshares), for GpuDevices.
    """
    if any(isinstance(d, GpuDevice) and d.counter_set is not None for d in devices):
        if not all(isinstance(d, GpuDevice) for d in devices):
            raise ValueError("a DynamicMIG pool is laid out from GpuDevices only, not API-shaped dicts")
        layout = partitionable_layout if server_version >= SPLIT_COUNTERS_SINCE else combined_layout
        gpus = [d for d in devices if isinstance(d, GpuDevice)]
        contents = layout(gpus, taints, release, consumable_shares)
    else:
        chunks = split_devices(
            [_api(d, taints, release, consumable_shares) if isinstance(d, GpuDevice) else d for d in devices]
        )
        contents = [{"devices": chunk} for chunk in chunks]
    return pool_slices(
        contents,
        driver=driver,
        node_name=node_name,
        node_uid=node_uid,
        generation=generation,
        release=release,
    )
