"""Devices → `resource.k8s.io/v1` ResourceSlice objects (pure), shaped as NVIDIA's driver publishes them.

Rules (nvidia-driver-shape.md §2, §4; wire-protocol.md §7.2, §7.3):
- one pool per node, named after the node; `generateName: <node>-<driver>-`; owned by the Node;
- a slice holds at most 128 devices, 64 once any device in it has taints or consumesCounters;
  a pool split over several slices gives each `resourceSliceCount` = number of slices;
- a node without devices publishes no slice at all (the real driver only runs on GPU nodes, so a
  GPU-less pool never appears in `kubectl get resourceslices`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fakeplugin.model import GpuDevice

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_RESTRICTED = 64  # when any device in the slice has taints or consumesCounters (1.35+)

_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


def format_quantity(n: int) -> str:
    """Canonical string of `resource.NewQuantity(n, BinarySI)`: the largest power-of-1024 suffix
    that keeps an integer (23028Mi, 15Gi, 1536); values below 1024 use DecimalSI as Kubernetes
    does (1000 → 1k)."""
    if n < 0:
        return "-" + format_quantity(-n)
    base, suffixes = (1024, _BINARY_SUFFIXES) if n >= 1024 else (1000, _DECIMAL_SUFFIXES)
    exponent = 0
    while n and n % base == 0 and exponent < len(suffixes) - 1:
        n //= base
        exponent += 1
    return f"{n}{suffixes[exponent]}"


def semver(version: str) -> str:
    """A dotted version as the driver's semver parse prints it: missing parts become 0 and leading
    zeros go (580.95.05 → 580.95.5, 13.0 → 13.0.0, 8.6 → 8.6.0)."""
    parts = [str(int(p)) for p in version.split(".")]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def device_to_api(dev: GpuDevice) -> dict[str, Any]:
    """One full-GPU device entry of a ResourceSlice: `{name, attributes, capacity}` (v25.12.0 set)."""
    attributes: dict[str, dict[str, str]] = {
        "type": {"string": dev.type},
        "uuid": {"string": dev.uuid},
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
    if dev.addressing_mode is not None:
        attributes["addressingMode"] = {"string": dev.addressing_mode}
    return {
        "name": dev.name,
        "attributes": attributes,
        "capacity": {"memory": {"value": format_quantity(dev.memory_bytes)}},
    }


def _restricted(device: dict[str, Any]) -> bool:
    return bool(device.get("taints") or device.get("consumesCounters"))


def split_devices(devices: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Cut API devices, in order, into slice-sized chunks (128, or 64 once a chunk holds a device
    with taints or consumesCounters). No devices → no chunks."""
    chunks: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    restricted = False
    for device in devices:
        limit = MAX_DEVICES_RESTRICTED if restricted or _restricted(device) else MAX_DEVICES
        if len(current) >= limit:
            chunks.append(current)
            current, restricted = [], False
        current.append(device)
        restricted = restricted or _restricted(device)
    if current:
        chunks.append(current)
    return chunks


def resource_slices(
    devices: Sequence[GpuDevice | dict[str, Any]],
    *,
    driver: str,
    node_name: str,
    node_uid: str,
    generation: int = 1,
) -> list[dict[str, Any]]:
    """The ResourceSlices of one node's pool, as the API server receives them on create.

    `devices` are GpuDevices (rendered with `device_to_api`) or already API-shaped device dicts,
    e.g. with taints or consumesCounters.
    """
    chunks = split_devices([device_to_api(d) if isinstance(d, GpuDevice) else d for d in devices])
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{node_name}-{driver}-",
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node_name,
                        "uid": node_uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for chunk in chunks
    ]
