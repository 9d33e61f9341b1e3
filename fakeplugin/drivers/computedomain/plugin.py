"""compute-domain.nvidia.com on the runtime: `ComputeDomainDriver` (runtime.driver.Driver) and its
`ComputeDomainNode` (NodePlugin) over the slices, the domain manager and the Preparer.

The node's inventory entry says whether the plugin runs there (GPUs) and its clique ID; both are read
afresh when the inventory or the node's labels change. Making a node does no I/O; its Preparer opens on
first use (`open`): the plugin's start, where it reads the node's NVLink fabric as upstream does
(fabric.py: the fabric-state fault refuses the start, or without CrashOnNVLinkFabricErrors leaves the node
without a clique until a restart) and, with `gpu_clique_label`, labels its node
`nvidia.com/gpu.clique=<cliqueID>`; `close` removes that label again. The driver's client runs its
ComputeDomain informer (client.DomainCache) from the first node's start to the first `close` (the host
stops): one per driver, so one for a fleet's every node.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from fakeplugin.drivers.computedomain import fabric, retry
from fakeplugin.drivers.computedomain.cliquelabel import CliqueLabel, LabelError
from fakeplugin.drivers.computedomain.domains import DomainApi, DomainManager, Running
from fakeplugin.drivers.computedomain.emulateddaemon import EmulatedDaemons
from fakeplugin.drivers.computedomain.preparer import ComputeDomainPreparer
from fakeplugin.drivers.computedomain.slices import CHANNEL, DAEMON, device_name, node_slices
from fakeplugin.drivers.gpu import node_devices
from fakeplugin.faults import fabricfaults
from fakeplugin.faults.daemonfaults import node_faults
from fakeplugin.inventory import NodeEntry
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.runtime.driver import Claim, GetClaim, NodeDirs, Obj
from fakeplugin.runtime.emulation import Emulation

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"  # the real plugin's --namespace default
START_ERRORS = (fabric.FabricError, LabelError)  # the plugin refuses to start (open)


class ComputeDomainDriver:
    """`api`: the driver's own API client (ComputeDomains, cliques, node labels: client.DomainClient);
    `namespace`: the driver's, where the controller keeps the ComputeDomainCliques; `emulate_daemon`: the
    plugin does the daemon's part (fakeplugin.drivers.computedomain.emulateddaemon); `retry_seconds`: how
    long a Prepare call retries a retryable failure (fakeplugin.drivers.computedomain.retry; 0: once, for
    a fleet, whose worker threads serve every node and whose pods are retried with backoff);
    `gpu_clique_label`: --gpu-clique-label-enabled (cliquelabel.py); `binding_conditions`:
    --binding-conditions, the channel device's KEP-5007 conditions (slices.py)."""

    def __init__(
        self,
        emulation: Emulation,
        api: DomainApi,
        *,
        namespace: str = DEFAULT_NAMESPACE,
        emulate_daemon: bool = False,
        retry_seconds: float = retry.TIMEOUT_SECONDS,
        gpu_clique_label: bool = False,
        binding_conditions: bool = False,
    ) -> None:
        self.emulation = emulation
        self.api = api
        self.namespace = namespace
        self.emulate_daemon = emulate_daemon  # `api` then also makes the daemon's calls (DomainClient's)
        self.retry_seconds = retry_seconds
        self.gpu_clique_label = gpu_clique_label
        self.binding_conditions = binding_conditions

    @property
    def name(self) -> str:
        return self.emulation.driver_name

    def start(self) -> None:
        """A node's plugin starts: the client's informer runs, if it has one (idempotent)."""
        if isinstance(self.api, Running):
            self.api.start()

    def stop(self) -> None:
        """The host stops (a node's `close`): the informer stops (idempotent)."""
        if isinstance(self.api, Running):
            self.api.stop()

    def node(
        self,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        boot_id: str,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> ComputeDomainNode:
        return ComputeDomainNode(self, node_name, inventory, dirs=dirs, boot_id=boot_id, get_claim=get_claim)


class ComputeDomainNode:
    """runtime.driver.NodePlugin of compute-domain.nvidia.com."""

    def __init__(
        self,
        driver: ComputeDomainDriver,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        boot_id: str,
        get_claim: GetClaim,
    ) -> None:
        self._driver = driver
        self._node = node_name
        self._inventory = inventory
        self._labels: dict[str, str] = {}
        self._uid = ""
        self._node_obj: Obj = {}
        self._daemons = (
            EmulatedDaemons(
                driver.api,  # type: ignore[arg-type]  # its generic calls (client.DomainClient's)
                node_name=node_name,
                namespace=driver.namespace,
                node=lambda: self._node_obj,
                clique_id=self.clique_id,
            )
            if driver.emulate_daemon
            else None
        )
        self._entry = self._lookup()
        # Set at start when no GPU's fabric was attached (the fabric-state fault, gate off): no clique.
        self._detached = False
        self._label = CliqueLabel(driver.api, node_name) if driver.gpu_clique_label else None
        e = driver.emulation
        domains = DomainManager(
            driver.api,
            node_name=node_name,
            namespace=driver.namespace,
            clique_id=self.clique_id,
            cliques_gate=e.feature_gates.get("ComputeDomainCliques", True),
        )
        # One Preparer per node: it owns the node's checkpoint and files.
        self._preparer = ComputeDomainPreparer(
            driver_name=e.driver_name,
            node_name=node_name,
            get_claim=get_claim,
            domains=domains,
            cdi_root=dirs.cdi_root,
            plugin_dir=dirs.plugin_dir,
            boot_id=boot_id,
            plugin_start=self._start,
            daemons=self._daemons,
        )

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def devices(self) -> Collection[str]:
        return (device_name(CHANNEL), device_name(DAEMON)) if self._publishes() else ()

    def clique_id(self) -> str:
        """`<clusterUUID>.<clique>` of the node's entry; "" without a fabric (or an entry), or when its
        fabric was not attached at start."""
        entry = self._entry
        return entry.clique_id if entry and not self._detached else ""

    def set_node(self, node: Obj) -> bool:
        meta = node["metadata"]
        before = (self._uid, self._entry)
        faults_before = node_faults(self._node_obj)
        self._node_obj = node
        if self._daemons and node_faults(node) != faults_before:
            self._daemons.node_changed()
        self._labels, self._uid = dict(meta.get("labels") or {}), meta["uid"]
        self._entry = self._lookup()
        self._relabel(before[1])
        return before != (self._uid, self._entry)

    def refresh(self) -> bool:
        before = self._entry
        self._entry = self._lookup()
        self._relabel(before)
        return before != self._entry

    def desired_slices(self, server_version: tuple[int, int]) -> list[Obj]:
        e = self._driver.emulation
        return node_slices(
            self._node,
            node_uid=self._uid,
            driver=e.driver_name,
            release=e.release,
            publishes=self._publishes(),
            binding_conditions=self._driver.binding_conditions,
        )

    def open(self) -> None:
        self._preparer.open()

    # A host that opens on first use (the fleet) cannot crash one node: a refused start fails each call.
    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        try:
            self._preparer.open()
        except START_ERRORS as e:
            return {
                c.ref.uid: PrepareResult(error=str(e)) for c in claims
            }  # not retryable: the start is over
        return retry.prepare_retrying(self._preparer.prepare, claims, timeout=self._driver.retry_seconds)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        try:
            self._preparer.open()
        except START_ERRORS as e:
            return {c.uid: str(e) for c in claims}
        return self._preparer.unprepare(claims)

    def prepared_claims(self) -> list[ClaimRef]:
        try:
            return self._preparer.prepared_claims()
        except START_ERRORS:
            return []  # never started: nothing prepared

    def close(self) -> None:
        """The plugin stops: its nvidia.com/gpu.clique label goes (gpu_clique_label); the driver's informer
        stops."""
        if self._label and self._preparer.opened:
            self._label.remove()
        self._driver.stop()

    def _lookup(self) -> NodeEntry | None:
        return self._inventory.inventory.node_entry(self._node, self._labels)

    def _publishes(self) -> bool:
        return bool(self._entry and self._entry.gpu_count)

    def _relabel(self, entry_before: NodeEntry | None) -> None:
        """A new clique ID of a started plugin goes onto the node's label."""
        before = entry_before.clique_id if entry_before and not self._detached else ""
        if self._label and self._preparer.opened and self.clique_id() != before:
            self._label.refresh(self.clique_id())

    def _read_fabric(self) -> None:
        """The start's read of the node's fabric (fabric.py); FabricError: the plugin refuses to start."""
        node = self._node_obj or self._fetch_node()
        meta = node.get("metadata") or {}
        try:
            faults = fabricfaults.parse_fabric_faults(
                (meta.get("annotations") or {}).get(fabricfaults.ANNOTATION)
            )
        except fabricfaults.FabricFaultError as e:
            log.error("node %s: %s; starting without fabric faults", self._node, e)
            faults = {}
        inventory, labels = self._inventory.inventory, dict(meta.get("labels") or {})
        entry = inventory.node_entry(self._node, labels)
        gpus = fabric.node_gpus(node_devices(inventory, self._node, labels), faults)
        e = self._driver.emulation
        try:
            found = fabric.clique_id(gpus, strict=e.feature_gates.get(fabric.GATE, True))
        except fabric.FabricError as err:
            raise fabric.start_error(err, e.release.name) from None
        self._detached = not found and bool(entry and entry.clique_id)

    def _fetch_node(self) -> Obj:
        try:
            return self._driver.api.get_node(self._node)
        except Exception as e:  # the real plugin needs no Node to read NVML: start without the faults
            log.warning(
                "node %s: cannot read the Node (%s): starting without its fabric faults", self._node, e
            )
            return {}

    def _start(self) -> None:
        """The plugin's start, before its prepare side's (Preparer `plugin_start`)."""
        self._driver.start()
        self._read_fabric()
        if self._label:
            self._label.set(self.clique_id())  # at start, fatal there as upstream's
