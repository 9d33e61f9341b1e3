"""What an inventory makes the plugins publish, rendered without a cluster (pure): the GPU driver's
DeviceClasses and every named node's ResourceSlices, or the ComputeDomain driver's; as multi-document YAML.
`fakeplugin render` prints them (commands.render); the tests and benchmarks compare and load them."""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from fakeplugin import DEFAULT_DRIVER_NAME, consumableshares, releases
from fakeplugin.drivers.gpu import SPLIT_COUNTERS_SINCE, device_classes, node_slices
from fakeplugin.inventory import Inventory
from fakeplugin.releases import DriverRelease


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Multi-document YAML, keys in API order (apiVersion, kind, metadata, spec), lines unwrapped."""
    return yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True, width=1000)


def render_documents(
    inv: Inventory,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    node_uid: str | None = None,
    dynamic_mig: bool = False,
    passthrough: bool = False,
    release: DriverRelease | None = None,
    server_version: tuple[int, int] = SPLIT_COUNTERS_SINCE,
    consumable_shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """DeviceClasses, then the slices of `node` (or of every node the inventory names, by name or by
    name prefix, in inventory order);
    `dynamic_mig`, `passthrough`: the plugin's DynamicMIG and PassthroughSupport gates; `release`: default
    the inventory's driverRelease;
    `server_version`: the API server's (major, minor), for the DynamicMIG layout; `consumable_shares`: the
    plugin's mode (fakeplugin.consumableshares)."""
    release = release or releases.get(inv.driver_release)
    if node is None:
        targets = [name for entry in inv.nodes for name in entry.node_names()]
    else:
        if inv.node_entry(node, labels) is None:
            raise ValueError(
                f'{inv.source}: no entry for node "{node}": not named, and no selector matches '
                f"labels {labels or {}}"
            )
        targets = [node]
    docs = device_classes(driver, release)
    for name in targets:
        uid = node_uid if node_uid and name == node else stand_in_node_uid(name)
        docs += node_slices(
            inv,
            name,
            node_uid=uid,
            driver=driver,
            labels=labels or {},
            dynamic_mig=dynamic_mig,
            passthrough=passthrough,
            release=release,
            server_version=server_version,
            consumable_shares=consumable_shares,
        )
    return docs


def render_compute_domains(
    inv: Inventory,
    *,
    driver: str,
    node: str | None = None,
    labels: dict[str, str] | None = None,
    node_uid: str | None = None,
    release: DriverRelease | None = None,
) -> list[dict[str, Any]]:
    """compute-domain.nvidia.com's DeviceClasses, then the slice of `node` (or of every named node)."""
    from fakeplugin.drivers import computedomain

    release = release or releases.get(inv.driver_release)
    names = [node] if node else [name for entry in inv.nodes for name in entry.node_names()]
    docs = computedomain.device_classes(driver)
    for name in names:
        entry = inv.node_entry(name, labels)
        if entry is None:
            raise ValueError(f'{inv.source}: no entry for node "{name}": not named, and no selector matches')
        uid = node_uid if node_uid and name == node else stand_in_node_uid(name)
        docs += computedomain.node_slices(
            name, node_uid=uid, driver=driver, release=release, publishes=entry.gpu_count > 0
        )
    return docs


def stand_in_node_uid(node_name: str) -> str:
    """A UID-shaped stand-in derived from the node name, for output made without an API server."""
    h = hashlib.sha256(f"fakeplugin/node-uid/{node_name}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
