"""gpu.nvidia.com on the runtime: a node's publish.node.NodeDevices and its prepare.GpuPreparer.

Making a node does no I/O; its Preparer opens on first use (`open`): it takes the node lock, removes stale
files, installs the fake nvidia-smi and loads the checkpoint, which a fleet of a thousand nodes need not
do at start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from fakeplugin.drivers.gpu.labeller import OperatorLabeller, PatchNode
from fakeplugin.drivers.gpu.prepare.devicestatus import StatusWriter
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.drivers.gpu.publish import siblings
from fakeplugin.drivers.gpu.publish.node import NodeDevices
from fakeplugin.faults import claimfaults, devicehealth
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, GpuDevice, PrepareResult
from fakeplugin.runtime.driver import Claim, GetClaim, NodeDirs, Obj
from fakeplugin.runtime.emulation import Emulation

log = logging.getLogger(__name__)


class GpuDriver:
    """`sync_checkpoints`: fsync each node's checkpoint before it replaces the old one (as the kubelet's
    checkpoint store does); a fleet turns it off, see fakeplugin.commands.fleet. `device_status`: with
    `--device-status`, the PUT (Kube.replace) that writes prepared claims' status.devices
    (prepare.devicestatus); None: never written, as by NVIDIA's releases. `node_labels`: with
    `--gpu-operator-labels`, the merge patch of a Node that keeps the GPU Operator's labels on it
    (labeller.py); None: the plugin writes no label. `nvml_library`: the built mock NVML library
    (`serve --nvml-library`) every claim's CDI spec mounts with its devices' NVML descriptions; None:
    containers get no NVML. `slices_changed`: called when a Prepare or Unprepare changed what a node
    publishes (PassthroughSupport's siblings, publish.siblings); the host sets it to wake its publisher."""

    def __init__(
        self,
        emulation: Emulation,
        *,
        sync_checkpoints: bool = True,
        device_status: Callable[[str, Obj], Obj] | None = None,
        node_labels: PatchNode | None = None,
        nvml_library: Path | None = None,
    ) -> None:
        self.emulation = emulation
        self.sync_checkpoints = sync_checkpoints
        self.device_status = device_status
        self.node_labels = node_labels
        self.nvml_library = nvml_library
        self.slices_changed: Callable[[], None] = lambda: None

    @property
    def name(self) -> str:
        return self.emulation.driver_name

    def node(
        self,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        boot_id: str,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> GpuNode:
        return GpuNode(
            self, node_name, inventory, dirs=dirs, boot_id=boot_id, get_claim=get_claim, quiet=quiet
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
        boot_id: str,
        get_claim: GetClaim,
        quiet: bool,
    ) -> None:
        e = driver.emulation
        self._driver = driver
        self._passthrough = e.passthrough
        self._siblings_lock = threading.Lock()  # the removed siblings' read-modify-write
        self._restored = False  # whether open() applied the removals a restart keeps
        # Known by name in the inventory: the devices are ready before the API server answers.
        self._devices = NodeDevices(
            inventory,
            node_name,
            driver=e.driver_name,
            dynamic_mig=e.dynamic_mig,
            passthrough=e.passthrough,
            release=e.release,
            consumable_shares=e.consumable_shares,
            log_level=logging.DEBUG if quiet else logging.INFO,
        )
        self._unprepare_faults = False  # the Node's fakeplugin.dev/unprepare-faults (faults.claimfaults)
        self._log_level = logging.DEBUG if quiet else logging.INFO
        self._status: StatusWriter | None = None
        if driver.device_status is not None:
            self._status = StatusWriter(
                driver=e.driver_name,
                node=node_name,
                get_claim=get_claim,
                replace=driver.device_status,
                log_level=self._log_level,
            )
        self._labeller = None
        if driver.node_labels is not None:
            self._labeller = OperatorLabeller(driver.node_labels, node_name, inventory)
        # One Preparer per node: it owns the node's checkpoint and files.
        self._preparer = GpuPreparer(
            driver_name=e.driver_name,
            node_name=node_name,
            devices=self._devices,
            get_claim=get_claim,
            cdi_root=dirs.cdi_root,
            plugin_dir=dirs.plugin_dir,
            feature_gates=e.feature_gates,
            release=e.release,
            consumable_shares=e.consumable_shares,
            device_nodes=e.device_nodes,
            boot_id=boot_id,
            sync_checkpoint=driver.sync_checkpoints,
            read_unprepare_faults=lambda: self._unprepare_faults,
            nvml_library=driver.nvml_library,
            removed=self._devices.removed,
        )

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
        if self._labeller is not None:
            self._labeller.node_changed(meta)
        return self._devices.set_node(meta.get("labels") or {}, meta["uid"], annotations)

    def refresh(self) -> bool:
        if self._labeller is not None:
            self._labeller.inventory_changed()
        return self._devices.refresh()

    def desired_slices(self, server_version: tuple[int, int]) -> list[Obj]:
        if self._passthrough and not self._restored:  # a fleet's node opens on first use: now
            try:
                self.open()
            except Exception as e:  # a corrupt checkpoint or a held lock: publish; Prepare reports it
                log.error("node %s: cannot read the checkpoint before publishing: %s", self.node_name, e)
        return self._devices.desired_slices(server_version)

    def device_state(self) -> tuple[Mapping[str, GpuDevice], Mapping[str, DeviceFault]]:
        """The node's devices and faults at one moment (telemetry: publish.node.NodeDevices.state)."""
        return self._devices.state()

    def health_state(self, device: str) -> tuple[str, DeviceFault | None] | None:
        """The device's kind for the health service and its injected fault; None once it is gone."""
        devices, faults = self._devices.state()
        found = devices.get(device)
        return (devicehealth.kind(found), faults.get(device)) if found else None

    def open(self) -> None:
        self._preparer.open()
        if self._passthrough and not self._restored:
            # As the real driver starts: its checkpoint read before it publishes (publish.siblings).
            claimed = self._preparer.claim_devices(completed_only=True).values()
            prepared = [n for names in claimed for n in names]
            self._remove(lambda r: r | siblings.removed_at_start(self._devices.all_devices(), prepared))
            self._restored = True

    def _remove(self, change: Callable[[frozenset[str]], frozenset[str]]) -> None:
        """Change the removed siblings; wake the publisher when that changed the slices."""
        with self._siblings_lock:
            changed = self._devices.set_removed(change(self._devices.removed()))
        if changed:
            self._driver.slices_changed()

    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        if self._passthrough:
            self.open()  # the removals a restart keeps come before this Prepare's
        results = self._preparer.prepare(claims)
        if self._passthrough:
            names = [d.device_name for r in results.values() if not r.error for d in r.devices]
            self._remove(lambda removed: removed | siblings.siblings(self._devices.all_devices(), names))
        if self._status is not None:  # after the node lock: the writes wait on the API server
            pool = self._devices.snapshot()
            for c in claims:
                if (result := results[c.ref.uid]).devices and not result.error:
                    self._status.prepared(c.ref, c.obj, {d.device_name for d in result.devices}, pool)
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        if self._passthrough:
            self.open()
        held = self._preparer.claim_devices() if self._passthrough else {}
        results = self._preparer.unprepare(claims)
        if held:
            done = {ref.uid for ref in claims if not results[ref.uid]}
            # A device another claim still holds (consumable shares, admin access) keeps its sibling
            # removed (main device_state.go Unprepare: isGpuUUIDInUseByOtherClaims).
            kept = {n for uid, names in held.items() if uid not in done for n in names}
            names = [n for uid in done for n in held.get(uid, ()) if n not in kept]
            self._remove(lambda removed: removed - siblings.siblings(self._devices.all_devices(), names))
        if self._status is not None:
            for ref in claims:
                if not results[ref.uid]:
                    self._status.unprepared(ref)
        return results

    def prepared_claims(self) -> list[ClaimRef]:
        return self._preparer.prepared_claims()

    def close(self) -> None:
        if self._labeller is not None:
            self._labeller.close()
        self._preparer.close()
