"""This node's view of the fleet inventory: which devices it has, reloaded when the file changes.

The inventory file is usually a ConfigMap mounted into the plugin's pod, so it can change under a
running plugin. A broken edit is logged and the last good inventory stays in force: a typo must
never make a node's GPUs vanish.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from fakeplugin.model import GpuDevice
from fakeplugin.publish.devices import devices_for_node
from fakeplugin.publish.inventory import Inventory, InventoryError, load_inventory

log = logging.getLogger(__name__)


class NodeDevices(Mapping[str, GpuDevice]):
    """Device name -> GpuDevice for one node; a live Mapping the prepare core reads from.

    Holds what the node publishes: full GPUs, MIG devices, DynamicMIG partitions (`dynamic_mig`: the
    DynamicMIG feature gate), so every allocated device name resolves.
    """

    def __init__(self, path: Path, node_name: str, *, dynamic_mig: bool = False) -> None:
        self._path = path
        self._node = node_name
        self._dynamic_mig = dynamic_mig
        self._lock = threading.Lock()
        self._digest = ""
        self._inventory: Inventory | None = None
        self._devices: dict[str, GpuDevice] = {}
        self.reload_if_changed()

    def reload_if_changed(self) -> bool:
        """Re-read the file when its content changed; True when a new inventory took effect."""
        data = self._path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._digest:
            return False
        try:
            inventory = load_inventory(self._path)
        except InventoryError as exc:
            if self._inventory is None:
                raise
            log.error("inventory %s changed but is invalid; keeping the previous one:\n%s", self._path, exc)
            self._digest = digest
            return False
        with self._lock:
            self._inventory, self._digest = inventory, digest
        if self._devices:
            log.info("inventory %s changed; reloaded", self._path)
        return True

    def needs_labels(self) -> bool:
        """True when this node is not named in the inventory, so its labels decide (selectors)."""
        assert self._inventory is not None
        return self._inventory.node_entry(self._node, {}) is None

    def resolve(self, labels: Mapping[str, str]) -> list[GpuDevice]:
        """Pick this node's entry (by name, else by label selector) and compute its devices."""
        with self._lock:
            inventory = self._inventory
        assert inventory is not None
        entry = inventory.node_entry(self._node, dict(labels))
        devices = (
            devices_for_node(inventory, entry, self._node, dynamic_mig=self._dynamic_mig)
            if entry is not None
            else []
        )
        with self._lock:
            before = set(self._devices)
            self._devices = {d.name: d for d in devices}
        if before != set(self._devices) or not devices:
            log.info(
                "node %s: %s",
                self._node,
                ", ".join(f"{d.name} {d.product_name} {d.uuid}" for d in devices)
                or "no inventory entry matches this node: publishing no devices",
            )
        return devices

    def __getitem__(self, name: str) -> GpuDevice:
        with self._lock:
            return self._devices[name]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._devices))

    def __len__(self) -> int:
        with self._lock:
            return len(self._devices)
