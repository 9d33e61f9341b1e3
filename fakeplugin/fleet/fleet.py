"""A fleet: every kwok-managed node's devices, slices and prepare core, in one process.

The nodes are the Node objects kwok manages (annotation kwok.x-k8s.io/node=fake, kwok's own default
selector); on each, every driver of the fleet (gpu.nvidia.com, and compute-domain.nvidia.com when asked)
runs as the NodePlugin `fakeplugin serve` runs on a kubelet node, all reading one inventory file, each
driver hosted by the same runtime loops (runtime.host). A node's prepare side is made on its first pod
with claims; its files live in <nodes dir>/<node>/ (cdi/, plugins/<driver>/, containers/), the
layout of a kubelet's root. On start and every minute the fleet reconciles as a kubelet does
(fleet.reconcile): what was prepared for pods or claims that are gone is unprepared, and the files of
nodes that are gone are removed.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from fakeplugin.fleet import heap
from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.dirs import FleetDirs
from fakeplugin.fleet.kubelet import FleetKubelet
from fakeplugin.fleet.nodeobjects import NodeOwner
from fakeplugin.fleet.poddra import PodDRA
from fakeplugin.fleet.reconcile import Reconciler
from fakeplugin.fleet.shard import WHOLE, Shard
from fakeplugin.fleet.stages import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.runtime.driver import Driver, NodeDirs, NodePlugin
from fakeplugin.runtime.host import Host
from fakeplugin.runtime.nodes import Nodes

# Every pool is re-planned from a fresh list of all the driver's slices this often: a safety net only,
# since the publisher also watches the slices and re-plans when someone else changes one of ours. At 5000
# nodes a pass is seconds of CPU per process (two lists of 80 MB of JSON, every node's desired slices), so
# a minute made it most of the fleet's CPU in a wave (issue 20, docs/benchmarks.md).
RESYNC_SECONDS = 600


def is_simulated(node: Obj) -> bool:
    return (node["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == KWOK_ANNOTATION_VALUE


class Fleet:
    """`drivers`: the DRA drivers every simulated node runs, each published and prepared for on its own,
    with `boot_id` (runtime.bootid) for every node's checkpoint,
    as a node's kubelet plugins are. `shard`, `label_selector`: the nodes of this process when several
    share the cluster (fleet.shard). `node_owner`: keeps the inventory's Node objects, when the fleet
    owns them (fleet.nodeobjects)."""

    def __init__(
        self,
        kube: FleetKube,
        *,
        inventory: InventoryFile,
        drivers: Sequence[Driver],
        boot_id: str,
        nodes_dir: Path,
        threads: int = 8,
        shard: Shard = WHOLE,
        label_selector: str = "",
        node_owner: NodeOwner | None = None,
    ) -> None:
        self.dirs = FleetDirs(nodes_dir)
        self._boot_id = boot_id
        self._node_owner = node_owner
        self._shard = shard
        self._kube = kube
        self._dra = PodDRA(
            kube, plugins=self.plugins, containers_dir=self.dirs.containers, cdi_root=self.dirs.cdi
        )
        self.nodes = {d.name: self._nodes(d, inventory) for d in drivers}
        self.hosts = [
            Host(
                kube,
                d.emulation,
                self.nodes[d.name],
                writers=threads,
                resync_seconds=RESYNC_SECONDS,
                label_selector=label_selector,
            )
            for d in drivers
        ]
        self.kubelet = FleetKubelet(kube, self._dra, threads=threads)
        self.reconciler = Reconciler(
            kube,
            served=self.served,
            plugins=self.plugins,
            pods_on=self.kubelet.pods_on,
            forget=self._forget,
            owns=shard.owns,
            dirs=self.dirs,
        )

    def _nodes(self, driver: Driver, inventory: InventoryFile) -> Nodes:
        def make(name: str) -> NodePlugin:
            dirs = NodeDirs(cdi_root=self.dirs.cdi(name), plugin_dir=self.dirs.plugin(name, driver.name))
            return driver.node(
                name, inventory, dirs=dirs, boot_id=self._boot_id, get_claim=self._kube.get_claim, quiet=True
            )

        return Nodes(
            inventory, make, accept=lambda n: is_simulated(n) and self._shard.owns(n["metadata"]["name"])
        )

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: follow the nodes and the inventory, publish, prepare. Returns when stopped, every
        node's plugins closed."""
        try:
            self._run(stop)
        finally:
            for nodes in self.nodes.values():
                nodes.close()

    def _run(self, stop: threading.Event) -> None:
        if self._node_owner:
            threading.Thread(
                target=self._node_owner.run, args=(stop,), name="node-objects", daemon=True
            ).start()
        for host in self.hosts:
            host.start(stop)
        # The pod watch acts on the nodes it knows: started once every driver listed them.
        for nodes in self.nodes.values():
            while not nodes.synced.wait(1.0):
                if stop.is_set():
                    return
        threading.Thread(target=self.kubelet.run, args=(stop,), name="pods", daemon=True).start()
        # Reconciled once the pods were listed (the kubelet's "sources ready"), then on every re-list.
        while not self.kubelet.synced.wait(1.0):
            if stop.is_set():
                return
        heap.freeze_start()  # every node's plugins and the listed pods: out of the collector's walks
        threading.Thread(
            target=self.reconciler.run, args=(stop, self.kubelet.relisted), name="reconcile", daemon=True
        ).start()
        stop.wait()

    def served(self) -> set[str]:
        """The nodes some driver of the fleet serves now."""
        return {name for nodes in self.nodes.values() for name in nodes.names()}

    def _forget(self, node: str) -> None:
        for nodes in self.nodes.values():
            nodes.forget(node)

    def plugins(self, node: str) -> Mapping[str, NodePlugin]:
        """Driver name → that driver on `node`; empty when it is not a node of the fleet."""
        return {name: plugin for name, nodes in self.nodes.items() if (plugin := nodes.get(node)) is not None}
