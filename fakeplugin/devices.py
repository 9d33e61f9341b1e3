"""Inventory + node → the node's GPU devices (pure).

Identity is derived, never random, so the same inventory and node give the same devices after a
restart: UUIDs from SHA-256(node name, minor) (122+ bits, unique across nodes for any practical
fleet); PCI addresses from a per-node 16-bit PCI domain (derived from the node name, as Hyper-V
style VMs show arbitrary domains) and a fixed table of bus numbers typical of 8-GPU servers. GPUs
beyond the 8th use the next domains. Distinct node names collide on a domain with probability
about 1/65536 per pair; UUIDs do not collide in practice.
"""

from __future__ import annotations

import hashlib

from fakeplugin.config import GpuEntry, Inventory, NodeEntry
from fakeplugin.model import GpuDevice

# Bus numbers of the GPUs of a typical dual-socket 8-GPU server; each sits under a root port
# on the bus just below it (0000:3b:00.0 → pcieRoot pci0000:3a).
_BUSES = (0x1B, 0x3B, 0x5E, 0x86, 0xAF, 0xD8, 0x2C, 0x4E)


def devices_for_node(inv: Inventory, entry: NodeEntry, node_name: str) -> list[GpuDevice]:
    """The devices of `node_name` served by `entry`: gpu-0..gpu-(n-1) in inventory order."""
    devices: list[GpuDevice] = []
    paths: list[str] = []  # the inventory entry of each device, for messages
    for gpu in entry.gpus:
        for _ in range(gpu.count):
            devices.append(_device(inv, gpu, node_name, minor=len(devices)))
            paths.append(gpu.path)
    _check_unique(devices, paths, node_name)
    return devices


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


def _device(inv: Inventory, gpu: GpuEntry, node_name: str, minor: int) -> GpuDevice:
    bus_id = gpu.pci_bus_id or pci_bus_id(node_name, minor)
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
