"""PassthroughSupport: a GPU and its VFIO device exclude each other once either is prepared (pure).

As the real driver decides it (kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0, v0.4.1 and main 95932046,
cmd/gpu-kubelet-plugin): Prepare, once a claim's devices are prepared, removes each one's sibling of the
other type on the same PCI bus ID from the allocatable devices (allocatable.go `RemoveSiblingDevices`,
device_state.go `Prepare`) and driver.go republishes the slice without it, so the scheduler no longer
allocates the sibling. A claim allocated the sibling before the slice changed fails at Prepare:
`requested device is not allocatable: <name>` (25.12), `allocatable not found for device "<name>"` (v0.4.1+).
Unprepare rediscovers the siblings of the claim's devices (device_state.go `discoverSiblingAllocatables`)
and republishes. The removals live in the plugin's memory: after a restart the driver enumerates again, and
a GPU bound to vfio-pci (a VFIO device of a prepared claim) is no NVML device, so it stays unpublished,
while the VFIO device of a prepared full GPU is published again (nvlib.go `enumerateGpuVfioDevices`).
Static and dynamic MIG devices have no siblings (RemoveSiblingDevices skips them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fakeplugin.model import GpuDevice

_EXCLUSIVE = frozenset({"gpu", "vfio"})


def siblings(devices: Mapping[str, GpuDevice], names: Iterable[str]) -> frozenset[str]:
    """The devices of `devices` that are siblings of those named: on the same PCI bus ID, the other of a
    full GPU and a VFIO device."""
    out: set[str] = set()
    for name in names:
        device = devices.get(name)
        if device is None or device.type not in _EXCLUSIVE:
            continue
        out |= {
            other.name
            for other in devices.values()
            if other.pci_bus_id == device.pci_bus_id and other.type in _EXCLUSIVE - {device.type}
        }
    return frozenset(out)


def removed_at_start(devices: Mapping[str, GpuDevice], prepared: Iterable[str]) -> frozenset[str]:
    """After a restart: the full GPUs whose VFIO device a prepared claim holds (bound to vfio-pci)."""
    vfio = [name for name in prepared if name in devices and devices[name].type == "vfio"]
    return siblings(devices, vfio)
