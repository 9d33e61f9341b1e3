"""One node's devices and desired ResourceSlices: the single owner of the publish pipeline for a node.

    inventory ─▶ this node's entry (by name, else by its labels) ─▶ devices ─▶ desired ResourceSlices

`node_devices` and `node_slices` are the pure steps; `render`, `validate` and the cluster use them directly.
`NodeDevices` is the live form `serve` runs: it follows the inventory file (inventory.file.InventoryFile;
usually a ConfigMap mounted into the plugin's pod, so it changes under a running plugin) and the node's
labels, UID and device-faults annotation (faults.devicefaults: taints in the slices, health for the
kubelet) and fabric-state annotation (faults.fabricfaults: the NVLink fabric the fake nvidia-smi shows)
from the API server.

Invariants:
- devices are recomputed as soon as the file changes, so Prepare sees an edit before the publisher has
  reached the API server (labels and UID are the last ones the API server gave; a node named in the
  inventory needs neither to know its devices);
- a broken edit is logged and the last good inventory stays in force: a typo must never make a node's
  GPUs vanish; likewise a broken device-faults or fabric-state annotation keeps the last good faults;
- a GPU whose architecture the release's go-nvlib cannot name fails the node as that release's plugin
  fails at start (EnumerationError, `check_architectures`): no devices, so no slice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fakeplugin import consumableshares, releases
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.drivers.gpu.publish.slices import SPLIT_COUNTERS_SINCE, resource_slices
from fakeplugin.faults import devicefaults, fabricfaults
from fakeplugin.faults.devicefaults import DeviceFault, DeviceFaultError
from fakeplugin.inventory import INSTANCE_TYPE_LABEL, Inventory
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import GpuDevice
from fakeplugin.profiles import NVML_ARCHITECTURES
from fakeplugin.releases import DriverRelease

log = logging.getLogger(__name__)


def node_devices(
    inventory: Inventory,
    node_name: str,
    labels: Mapping[str, str],
    *,
    dynamic_mig: bool = False,
    passthrough: bool = False,
    release: DriverRelease | None = None,
) -> list[GpuDevice]:
    """The devices `node_name` publishes: its entry by name, else the first selector matching `labels`;
    none when no entry serves it. ValueError names the entry when its devices cannot be made;
    with `release` (the GPU plugin's), EnumerationError when that release's plugin cannot start.
    `dynamic_mig`, `passthrough`: the DynamicMIG and PassthroughSupport gates (publish.devices)."""
    entry = inventory.node_entry(node_name, dict(labels))
    if entry is None:
        return []
    devices = devices_for_node(inventory, entry, node_name, dynamic_mig=dynamic_mig, passthrough=passthrough)
    if release is not None:
        check_architectures(devices, release)
    return devices


class EnumerationError(ValueError):
    """The GPU plugin of this release fails at start enumerating the node's GPUs: it publishes nothing."""


def check_architectures(devices: Iterable[GpuDevice], release: DriverRelease) -> None:
    """EnumerationError, with the error the release's plugin exits with, when a GPU has an architecture its
    go-nvlib cannot name (`DriverRelease.architectures`). The plugin visits GPUs by NVML index and stops at
    the first error; the chain is v25.12.0's and v0.4.1's: main.go, device_state.go NewDeviceState, nvlib.go
    enumerateAllPossibleDevices, go-nvlib VisitDevices (twice), nvlib.go GetPerGpuAllocatableDevices and
    getGpuInfo, go-nvlib GetArchitectureAsString."""
    unknown = [d for d in devices if d.architecture not in release.architectures]
    if not unknown:
        return
    first = min(unknown, key=lambda d: d.index)
    i, arch = first.index, first.architecture
    raise EnumerationError(
        "error creating driver: error enumerating all possible devices: error enumerating allocatable "
        f"devices: error visiting devices: error visiting device: error getting info for GPU {i}: error "
        f"getting architecture for device {i}: error interpreting device architecture as string: "
        f"{NVML_ARCHITECTURES[arch]}"
    )


def node_slices(
    inventory: Inventory,
    node_name: str,
    *,
    node_uid: str,
    driver: str,
    labels: Mapping[str, str] = MappingProxyType({}),
    dynamic_mig: bool = False,
    passthrough: bool = False,
    release: DriverRelease | None = None,
    server_version: tuple[int, int] = SPLIT_COUNTERS_SINCE,
    consumable_shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """The ResourceSlices the plugin of `node_name` publishes (what `serve` creates, `render` prints),
    shaped as `release` publishes them (default: the inventory's driverRelease), laid out for an API
    server of `server_version` (major, minor), with the plugin's `consumable_shares` mode."""
    release = release or releases.get(inventory.driver_release)
    devices = node_devices(
        inventory, node_name, labels, dynamic_mig=dynamic_mig, passthrough=passthrough, release=release
    )
    return resource_slices(
        devices,
        driver=driver,
        node_name=node_name,
        node_uid=node_uid,
        release=release,
        server_version=server_version,
        consumable_shares=consumable_shares,
    )


class NodeDevices(Mapping[str, GpuDevice]):
    """Device name → GpuDevice of one node, live; and the node's desired ResourceSlices.

    Holds what the node publishes: full GPUs, MIG devices, DynamicMIG partitions (`dynamic_mig`: the
    DynamicMIG feature gate), VFIO devices (`passthrough`: PassthroughSupport), so every allocated device
    name resolves; less the devices `set_removed` names (PassthroughSupport: the siblings of prepared
    devices, which the real driver removes from its allocatable devices and its slice), which neither
    publish nor resolve. Safe across threads: the publisher,
    the inventory watcher and Prepare's worker threads read and update it; a reader needing several devices
    consistent with each other takes `snapshot()`. `source` is the inventory's path, or an `InventoryFile`
    shared with other nodes (then `refresh` after its reload).

    `release` is the driver release the plugin started as (`serve` resolves it once: --driver-release, else
    the inventory's driverRelease); like a real driver's version it does not change under a running plugin.
    `consumable_shares`: the plugin's mode (fakeplugin.consumableshares.parse), likewise fixed at start.
    """

    def __init__(
        self,
        source: Path | InventoryFile,
        node_name: str,
        *,
        driver: str,
        dynamic_mig: bool = False,
        passthrough: bool = False,
        release: DriverRelease | None = None,
        consumable_shares: str = consumableshares.DISABLED,
        log_level: int = logging.INFO,
    ) -> None:
        self._source = source if isinstance(source, InventoryFile) else InventoryFile(source)
        self._log_level = log_level  # of the line naming the node's devices when they change
        self._node = node_name
        self._driver = driver
        self._dynamic_mig = dynamic_mig
        self._passthrough = passthrough
        self._release = release or releases.get(None)
        self._consumable_shares = consumable_shares
        self._lock = threading.Lock()
        self._labels: dict[str, str] | None = None  # None until the API server told us
        self._uid = ""
        # Replaced whole by _install, never mutated: a reference taken under the lock is a snapshot.
        self._all: dict[str, GpuDevice] = {}  # every device the inventory makes
        self._removed: frozenset[str] = frozenset()
        self._devices: dict[str, GpuDevice] = {}  # _all less _removed: what publishes and resolves
        self._faults_text: str | None = None  # the annotation as last seen
        self._faults: dict[str, DeviceFault] = {}
        self._fabric_text: str | None = None  # the fabric-state annotation as last seen
        self._fabric_faults: dict[str, fabricfaults.FabricFault] = {}
        self._inventory = self._source.inventory
        self._install(self._compute(self._inventory, None))  # ValueError names the entry

    @property
    def node_name(self) -> str:
        return self._node

    def reload_if_changed(self) -> bool:
        """Re-read the file when its content changed; True when a new inventory took effect (the devices
        are then already recomputed). A broken edit is logged and the last good inventory stays."""
        self._source.reload_if_changed()
        return self.refresh()

    def refresh(self) -> bool:
        """Recompute the devices when the shared inventory changed since; True when it had."""
        inventory = self._source.inventory
        if inventory is self._inventory:
            return False
        with self._lock:
            labels = self._labels
        try:
            devices = self._compute(inventory, labels)
        except ValueError as exc:
            log.error("node %s: the new inventory cannot make its devices; keeping them: %s", self._node, exc)
            self._inventory = inventory
            return False
        with self._lock:
            before, self._inventory = self._inventory, inventory
        if (
            before.driver_release != inventory.driver_release
            and inventory.driver_release != self._release.name
        ):
            log.warning(
                "inventory %s now says driverRelease %s; this plugin emulates %s until it restarts",
                self._source.path,
                inventory.driver_release,
                self._release.name,
            )
        self._install(devices)
        return True

    def set_node(
        self, labels: Mapping[str, str], uid: str, annotations: Mapping[str, str] = MappingProxyType({})
    ) -> bool:
        """The node as the API server shows it; its labels may pick another selector entry, its
        device-faults annotation taints devices. True when the desired slices or health may have changed.
        ValueError names the inventory entry whose devices cannot be made."""
        faults_changed = self._set_faults(annotations.get(devicefaults.ANNOTATION))
        fabric_changed = self._set_fabric(annotations.get(fabricfaults.ANNOTATION))
        with self._lock:
            changed = self._labels != dict(labels)
            uid_changed = self._uid != uid
            self._labels, self._uid = dict(labels), uid
            inventory = self._inventory
        if changed or fabric_changed:
            self._install(self._compute(inventory, dict(labels)))
        return changed or uid_changed or faults_changed

    def set_removed(self, names: frozenset[str]) -> bool:
        """Take the devices removed from the allocatable ones; True when that changed."""
        with self._lock:
            if names == self._removed:
                return False
            self._removed = names
            self._devices = {n: d for n, d in self._all.items() if n not in names}
        return True

    def removed(self) -> frozenset[str]:
        with self._lock:
            return self._removed

    def all_devices(self) -> Mapping[str, GpuDevice]:
        """Every device the inventory makes, removed ones too (read-only, as `snapshot`)."""
        with self._lock:
            return MappingProxyType(self._all)

    def snapshot(self) -> Mapping[str, GpuDevice]:
        """The devices as they are now, read-only; a later reload does not change them. One lock, unlike
        `dict(self)`, which takes it for the names and again per device (a reload in between: KeyError)."""
        with self._lock:
            return MappingProxyType(self._devices)

    def state(self) -> tuple[Mapping[str, GpuDevice], Mapping[str, DeviceFault]]:
        """The devices and their faults at one moment (one lock; both are replaced whole, never mutated):
        telemetry's XID values agree with the taints of the same state."""
        with self._lock:
            return MappingProxyType(self._devices), MappingProxyType(self._faults)

    def fault(self, name: str) -> DeviceFault | None:
        """The device's injected fault, if any (for the health service)."""
        with self._lock:
            return self._faults.get(name)

    def desired_slices(self, server_version: tuple[int, int] = SPLIT_COUNTERS_SINCE) -> list[dict[str, Any]]:
        """The ResourceSlices of this node's pool, once `set_node` gave the node's UID, laid out for an API
        server of `server_version` (major, minor)."""
        with self._lock:
            assert self._uid, "set_node() first: slices are owned by the Node object"
            devices, uid = list(self._devices.values()), self._uid
            taints = {name: f.taints(self._driver, server_version) for name, f in self._faults.items()}
        return resource_slices(
            devices,
            driver=self._driver,
            node_name=self._node,
            node_uid=uid,
            taints=taints,
            release=self._release,
            server_version=server_version,
            consumable_shares=self._consumable_shares,
        )

    def _set_faults(self, text: str | None) -> bool:
        """Take the node's device-faults annotation; a bad one is logged and the last good one stays."""
        with self._lock:
            if text == self._faults_text:
                return False
            self._faults_text = text
            names = set(self._devices)
        try:
            faults = devicefaults.parse_device_faults(text)
        except DeviceFaultError as exc:
            log.error("node %s: %s; keeping the device faults in force before", self._node, exc)
            return False
        unknown = sorted(set(faults) - names)
        if unknown:
            log.error(
                "node %s: annotation %s=%r names devices this node does not have: %s (has: %s)",
                self._node,
                devicefaults.ANNOTATION,
                text,
                ", ".join(unknown),
                ", ".join(sorted(names)) or "none",
            )
        with self._lock:
            self._faults = faults
        shown = "; ".join(f"{name}: {fault.message}" for name, fault in faults.items())
        log.info("node %s: device faults %s", self._node, shown or "cleared")
        return True

    def _set_fabric(self, text: str | None) -> bool:
        """Take the node's fabric-state annotation; a bad one is logged and the last good one stays. True
        when the faults changed (the devices are to be made again)."""
        with self._lock:
            if text == self._fabric_text:
                return False
            self._fabric_text = text
            devices = list(self._devices.values())
        try:
            faults = fabricfaults.parse_fabric_faults(text)
        except fabricfaults.FabricFaultError as exc:
            log.error("node %s: %s; keeping the fabric faults in force before", self._node, exc)
            return False
        unknown = fabricfaults.unknown_devices(faults, devices)
        if unknown:
            log.error(
                "node %s: annotation %s=%r names no GPU of this node that reports a fabric: %s",
                self._node,
                fabricfaults.ANNOTATION,
                text,
                ", ".join(unknown),
            )
        with self._lock:
            self._fabric_faults = faults
        log.info("node %s: fabric faults %s", self._node, text or "cleared")
        return True

    def _compute(self, inventory: Inventory, labels: dict[str, str] | None) -> list[GpuDevice] | None:
        """None: selected by labels we do not know yet (nothing to publish or prepare until we do)."""
        if labels is None and inventory.node_entry(self._node, {}) is None:
            return None
        devices = node_devices(
            inventory,
            self._node,
            labels or {},
            dynamic_mig=self._dynamic_mig,
            passthrough=self._passthrough,
            release=self._release,
        )
        with self._lock:
            faults = self._fabric_faults
        return fabricfaults.with_fabric_faults(devices, faults)

    def _install(self, devices: list[GpuDevice] | None) -> None:
        if devices is None:
            return
        with self._lock:
            before = set(self._all)
            self._all = {d.name: d for d in devices}
            self._devices = {n: d for n, d in self._all.items() if n not in self._removed}
        if before != set(self._all) or not devices:
            # A fleet has a thousand of these: its own summary line is enough at info. A node of an
            # instance type the inventory does not know (Karpenter launched it) is worth a warning.
            kind = (self._labels or {}).get(INSTANCE_TYPE_LABEL)
            entry = None if devices else self._inventory.node_entry(self._node, self._labels or {})
            unknown = not devices and entry is None
            log.log(
                logging.WARNING if kind and unknown else self._log_level,
                "node %s: %s",
                self._node,
                ", ".join(f"{d.name} {d.product_name} {d.uuid}" for d in devices)
                or (
                    "no inventory entry matches this node"
                    + (f" (no instanceType entry {kind}, no selector of its labels)" if kind else "")
                    if unknown
                    else f"its entry {entry.path if entry else ''} has no GPUs"
                )
                + ": publishing no devices",
            )

    def __getitem__(self, name: str) -> GpuDevice:
        with self._lock:
            return self._devices[name]

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            return iter(list(self._devices))

    def __len__(self) -> int:
        with self._lock:
            return len(self._devices)
