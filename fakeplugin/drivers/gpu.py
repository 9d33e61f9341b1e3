"""gpu.nvidia.com on the runtime: a node's publish.node.NodeDevices and its prepare.Preparer.

The Preparer is made on first use (`open`): it takes the node lock, removes stale files, installs the
fake nvidia-smi and loads the checkpoint, which a fleet of a thousand nodes need not do at start.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.prepare import claimfaults
from fakeplugin.prepare.checkpoint import BOOT_ID_FILE, read_boot_id
from fakeplugin.prepare.preparer import Preparer
from fakeplugin.publish.node import NodeDevices
from fakeplugin.runtime.driver import GetClaim, NodeDirs, Obj
from fakeplugin.runtime.emulation import Emulation

log = logging.getLogger(__name__)


class GpuDriver:
    """`sync_checkpoints`: fsync each node's checkpoint before it replaces the old one (as the kubelet's
    checkpoint store does); a fleet turns it off, see fakeplugin.commands.fleet."""

    def __init__(
        self, emulation: Emulation, *, boot_id_file: Path = BOOT_ID_FILE, sync_checkpoints: bool = True
    ) -> None:
        self.emulation = emulation
        self._boot_id_file = boot_id_file
        self._sync_checkpoints = sync_checkpoints

    @functools.cached_property
    def _boot_id(self) -> str:
        """Read once: a boot outlives the process (a fleet makes a Preparer for each of its nodes)."""
        return read_boot_id(self._boot_id_file)

    @property
    def name(self) -> str:
        return self.emulation.driver_name

    def node(
        self,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> GpuNode:
        return GpuNode(self, node_name, inventory, dirs=dirs, get_claim=get_claim, quiet=quiet)

    def preparer(
        self,
        devices: NodeDevices,
        dirs: NodeDirs,
        get_claim: GetClaim,
        read_unprepare_faults: Callable[[], bool],
    ) -> Preparer:
        e = self.emulation
        return Preparer(
            driver_name=e.driver_name,
            node_name=devices.node_name,
            devices=devices,
            get_claim=get_claim,
            cdi_root=dirs.cdi_root,
            plugin_dir=dirs.plugin_dir,
            feature_gates=e.feature_gates,
            release=e.release,
            consumable_shares=e.consumable_shares,
            device_nodes=e.device_nodes,
            boot_id=self._boot_id,
            sync_checkpoint=self._sync_checkpoints,
            read_unprepare_faults=read_unprepare_faults,
        )


class GpuNode:
    """runtime.driver.NodePlugin of gpu.nvidia.com."""

    def __init__(
        self,
        driver: GpuDriver,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        get_claim: GetClaim,
        quiet: bool,
    ) -> None:
        e = driver.emulation
        # Known by name in the inventory: the devices are ready before the API server answers.
        self._devices = NodeDevices(
            inventory,
            node_name,
            driver=e.driver_name,
            dynamic_mig=e.dynamic_mig,
            release=e.release,
            consumable_shares=e.consumable_shares,
            log_level=logging.DEBUG if quiet else logging.INFO,
        )
        self._driver = driver
        self._dirs = dirs
        self._get_claim = get_claim
        self._opening = threading.Lock()
        self._preparer: Preparer | None = None
        self._unprepare_faults = False  # the Node's fakeplugin.dev/unprepare-faults (prepare.claimfaults)
        self._log_level = logging.DEBUG if quiet else logging.INFO

    @property
    def node_name(self) -> str:
        return self._devices.node_name

    @property
    def devices(self) -> Collection[str]:
        return self._devices

    def set_node(self, node: Obj) -> bool:
        meta = node["metadata"]
        annotations = meta.get("annotations") or {}
        unprepare_faults = bool(annotations.get(claimfaults.UNPREPARE_FAULTS))
        if unprepare_faults != self._unprepare_faults:
            log.log(
                self._log_level,
                "node %s: %s %s: Unprepare reads the unprepare-error of %s",
                self.node_name,
                claimfaults.UNPREPARE_FAULTS,
                "set" if unprepare_faults else "removed",
                "every claim" if unprepare_faults else "claims that had one at Prepare only",
            )
            self._unprepare_faults = unprepare_faults
        return self._devices.set_node(meta.get("labels") or {}, meta["uid"], annotations)

    def refresh(self) -> bool:
        return self._devices.refresh()

    def desired_slices(self, server_version: tuple[int, int]) -> list[Obj]:
        return self._devices.desired_slices(server_version)

    def health_of(self, device: str) -> tuple[bool, str] | None:
        fault = self._devices.fault(device)
        return (fault.healthy, fault.message) if fault else None

    def open(self) -> None:
        self._open()

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return self._open().prepare(claims)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        return self._open().unprepare(claims)

    def prepared_claims(self) -> list[ClaimRef]:
        return self._open().prepared_claims()

    def _open(self) -> Preparer:
        with self._opening:  # one Preparer per node: it owns the node's checkpoint and files
            if self._preparer is None:
                self._preparer = self._driver.preparer(
                    self._devices, self._dirs, self._get_claim, lambda: self._unprepare_faults
                )
            return self._preparer
