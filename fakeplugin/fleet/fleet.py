"""A fleet: every kwok-managed node's devices, slices and prepare core, in one process.

The nodes are the Node objects kwok manages (annotation kwok.x-k8s.io/node=fake, kwok's own default
selector); what each publishes is what `fakeplugin serve` would publish there: the same
publish.node.NodeDevices per node, all sharing one InventoryFile. A node's Preparer is made on its first
pod with claims; its files live in <state-dir>/nodes/<node>/ (cdi/, plugin/, containers/), the layout of
the local cluster's kubelet nodes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path

from fakeplugin import consumableshares
from fakeplugin.fleet.api import FleetKube, Obj, list_and_watch
from fakeplugin.fleet.kubelet import FleetKubelet
from fakeplugin.fleet.poddra import PodDRA
from fakeplugin.fleet.publisher import FleetPublisher
from fakeplugin.fleet.stages import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from fakeplugin.prepare.preparer import Preparer
from fakeplugin.publish.node import InventoryFile, NodeDevices
from fakeplugin.releases import DriverRelease

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
INVENTORY_POLL_SECONDS = 5.0


class FleetDirs:
    """<root>/nodes/<node>/: a simulated node's CDI root, plugin dir (checkpoint, nvidia-smi data) and
    container records."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def node(self, name: str) -> Path:
        return self.root / "nodes" / name

    def cdi(self, name: str) -> Path:
        return self.node(name) / "cdi"

    def plugin(self, name: str) -> Path:
        return self.node(name) / "plugin"

    def containers(self, name: str) -> Path:
        return self.node(name) / "containers"


class Fleet:
    def __init__(
        self,
        kube: FleetKube,
        *,
        inventory: Path,
        driver: str,
        state_dir: Path,
        feature_gates: Mapping[str, bool],
        release: DriverRelease,
        consumable_shares: str = consumableshares.DISABLED,
        device_nodes: bool = False,
        workers: int = 8,
    ) -> None:
        self._kube = kube
        self._inventory = InventoryFile(inventory)  # InventoryError names the file and field
        self._driver = driver
        self.dirs = FleetDirs(state_dir)
        self._gates = dict(feature_gates)
        self._release = release
        self._consumable_shares = consumable_shares
        self._device_nodes = device_nodes
        self._mutex = threading.Lock()
        self._devices: dict[str, NodeDevices] = {}  # kwok-managed nodes, by name
        self._preparers: dict[str, Preparer] = {}
        self._server_version: tuple[int, int] | None = None  # asked once, on the first publish
        self.publisher = FleetPublisher(
            kube, driver=driver, desired=self._desired, release=release, writers=workers
        )
        self._dra = PodDRA(
            kube, preparer=self._preparer, containers_dir=self.dirs.containers, cdi_root=self.dirs.cdi
        )
        self.kubelet = FleetKubelet(kube, self._dra, workers=workers)
        self.nodes_synced = threading.Event()

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: follow the nodes and the inventory, publish, prepare. Returns when stopped."""
        threads = [
            threading.Thread(target=self._watch_nodes, args=(stop,), name="nodes", daemon=True),
            threading.Thread(target=self._watch_inventory, args=(stop,), name="inventory", daemon=True),
        ]
        for t in threads:
            t.start()
        # The publisher and the pod watch act on the nodes they know: start them once the nodes are listed.
        while not self.nodes_synced.wait(1.0):
            if stop.is_set():
                return
        workers = [
            threading.Thread(target=self.publisher.run, args=(stop,), name="publisher", daemon=True),
            threading.Thread(target=self.kubelet.run, args=(stop,), name="pods", daemon=True),
        ]
        for t in workers:
            t.start()
        stop.wait()

    # -- nodes ------------------------------------------------------------------------------------------

    def node_names(self) -> list[str]:
        with self._mutex:
            return sorted(self._devices)

    def _watch_nodes(self, stop: threading.Event) -> None:
        def on_event(kind: str, obj: Obj) -> None:
            if kind == "DELETED":
                self._drop(obj["metadata"]["name"])
            else:
                self._node(obj)

        list_and_watch(
            self._kube, NODES, stop=stop, on_list=self._set_nodes, on_event=on_event, synced=self.nodes_synced
        )

    def _set_nodes(self, nodes: list[Obj]) -> None:
        names = {n["metadata"]["name"] for n in nodes}
        for gone in set(self.node_names()) - names:
            self._drop(gone)
        changed = [self._node(n, wake=False) for n in nodes]
        with self._mutex:
            devices = [len(d) for d in self._devices.values()]
        log.info(
            "fleet: %d kwok-managed nodes, %d of them with %d devices",
            len(devices),
            sum(1 for n in devices if n),
            sum(devices),
        )
        if any(changed):
            self.publisher.wake.set()

    def _node(self, obj: Obj, *, wake: bool = True) -> bool:
        meta = obj["metadata"]
        name = meta["name"]
        if (meta.get("annotations") or {}).get(KWOK_ANNOTATION) != KWOK_ANNOTATION_VALUE:
            return self._drop(name)
        with self._mutex:
            devices = self._devices.get(name)
        try:
            new = devices is None
            if devices is None:
                devices = NodeDevices(
                    self._inventory,
                    name,
                    driver=self._driver,
                    dynamic_mig=self._gates.get("DynamicMIG", False),
                    release=self._release,
                    consumable_shares=self._consumable_shares,
                    log_level=logging.DEBUG,
                )
            changed = devices.set_node(meta.get("labels") or {}, meta["uid"], meta.get("annotations") or {})
        except ValueError as exc:  # this node's entry cannot make devices: the others still can
            log.error("node %s: %s", name, exc)
            return False
        if new:
            with self._mutex:  # only once its UID is known: the publisher asks for its slices from now on
                self._devices[name] = devices
        if changed and wake:
            self.publisher.wake.set()
        return changed

    def _drop(self, name: str) -> bool:
        with self._mutex:
            return self._devices.pop(name, None) is not None

    def _watch_inventory(self, stop: threading.Event) -> None:
        while not stop.wait(INVENTORY_POLL_SECONDS):
            try:
                if self._inventory.reload_if_changed():
                    with self._mutex:
                        nodes = list(self._devices.values())
                    if any([n.refresh() for n in nodes]):
                        self.publisher.wake.set()
            except OSError as exc:  # e.g. a ConfigMap symlink swap in progress: next time
                log.warning("reading inventory failed: %s", exc)

    # -- what the publisher and the kubelet ask ------------------------------------------------------------

    def _desired(self) -> dict[str, list[Obj]]:
        with self._mutex:
            nodes = list(self._devices.values())
        if self._server_version is None:  # the DynamicMIG layout follows it, as in `serve`
            self._server_version = self._kube.server_version()
        return {n.node_name: n.desired_slices(self._server_version) for n in nodes}

    def _preparer(self, node: str) -> Preparer | None:
        with self._mutex:
            preparer = self._preparers.get(node)
            devices = self._devices.get(node)
        if preparer is not None or devices is None:
            return preparer
        # Made outside the mutex (it takes the node lock, cleans up, installs nvidia-smi); two threads may
        # race to make one, the loser's is dropped: both worked on the same files under the node lock.
        preparer = Preparer(
            driver_name=self._driver,
            node_name=node,
            devices=devices,
            get_claim=self._dra.get_claim,
            cdi_root=self.dirs.cdi(node),
            plugin_dir=self.dirs.plugin(node),
            feature_gates=self._gates,
            release=self._release,
            consumable_shares=self._consumable_shares,
            device_nodes=self._device_nodes,
        )
        with self._mutex:
            return self._preparers.setdefault(node, preparer)
