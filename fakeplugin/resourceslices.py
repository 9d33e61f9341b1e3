"""A pool of API-shaped devices → `resource.k8s.io/v1` ResourceSlice objects, as the upstream resourceslice
controller writes them for any driver (pure): a slice holds at most 128 devices, 64 once any device in it has
taints or consumesCounters (kubernetes/api v0.35.0 resource/v1/types.go); every slice of a pool says how
many there are (`resourceSliceCount`), is owned by the Node and is named by the release's k8s libraries
(kubernetes/dynamic-resource-allocation v0.35.0 resourceslice/resourceslicecontroller.go;
fakeplugin.releases).
What a driver's devices look like is its own (fakeplugin.drivers.gpu.publish.slices,
fakeplugin.drivers.computedomain.slices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fakeplugin import DEFAULT_DRIVER_NAME, releases
from fakeplugin.k8snames import is_dns_subdomain
from fakeplugin.releases import DriverRelease

API_VERSION = "resource.k8s.io/v1"
MAX_DEVICES = 128
MAX_DEVICES_RESTRICTED = 64  # when any device in the slice has taints or consumesCounters (1.35+)
SLICE_INDEX_MIN_DIGITS = 5  # resourceslice controller (k8s libs 0.36) resourceSliceIndexMinLength
MAX_DRIVER_NAME = 63


def check_driver_name(driver: str) -> str:
    """`driver` if the API server accepts it as a driver name (a DNS subdomain of <= 63 characters)."""
    if not is_dns_subdomain(driver, MAX_DRIVER_NAME):
        raise ValueError(
            f'invalid driver name "{driver}": must be a lower-case DNS subdomain of at most '
            f"{MAX_DRIVER_NAME} characters, e.g. {DEFAULT_DRIVER_NAME}"
        )
    return driver


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


def pool_slices(
    contents: Sequence[Mapping[str, Any]],
    *,
    driver: str,
    node_name: str,
    node_uid: str,
    generation: int = 1,
    release: DriverRelease | None = None,
) -> list[dict[str, Any]]:
    """The ResourceSlices of one node's pool, as the API server receives them on create: one per entry of
    `contents` (a slice's `devices` and/or `sharedCounters`, already cut to the limits). `release`: the
    emulated driver release, which names the slices (default: the default release)."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": _generate_name(
                    release or releases.get(None), index, len(contents), driver, node_name
                ),
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
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(contents)},
                **content,
            },
        }
        for index, content in enumerate(contents)
    ]


def _generate_name(release: DriverRelease, index: int, count: int, driver: str, node_name: str) -> str:
    """The resourceslice controller's generateName for slice `index` of `count` in a pool."""
    if not release.slice_index_prefix:
        return f"{node_name}-{driver}-"
    digits = max(SLICE_INDEX_MIN_DIGITS, len(f"{count - 1:x}"))
    return f"{index:0{digits}x}-{driver}-{node_name}-"
