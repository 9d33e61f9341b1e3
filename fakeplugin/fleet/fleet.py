"""A fleet: every kwok-managed node's devices, slices and prepare core, in one process.

The nodes are the Node objects kwok manages (annotation kwok.x-k8s.io/node=fake, kwok's own default
selector); each is served by the same driver (runtime.driver.NodePlugin) `fakeplugin serve` runs on a
kubelet node, all reading one inventory file, hosted by the same runtime loops (runtime.host). A node's
prepare side is made on its first pod with claims; its files live in <state-dir>/nodes/<node>/ (cdi/,
plugin/, containers/), the layout of the local cluster's kubelet nodes.
"""

from __future__ import annotations

import threading
from pathlib import Path

from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.kubelet import FleetKubelet
from fakeplugin.fleet.poddra import PodDRA
from fakeplugin.fleet.stages import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from fakeplugin.publish.node import InventoryFile
from fakeplugin.runtime.driver import Driver, NodeDirs, NodePlugin
from fakeplugin.runtime.emulation import Emulation
from fakeplugin.runtime.host import Host
from fakeplugin.runtime.nodes import Nodes

RESYNC_SECONDS = 60  # every pool is re-planned from a fresh list of all the driver's slices this often


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


def is_simulated(node: Obj) -> bool:
    return (node["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == KWOK_ANNOTATION_VALUE


class Fleet:
    def __init__(
        self,
        kube: FleetKube,
        *,
        inventory: InventoryFile,
        emulation: Emulation,
        driver: Driver,
        state_dir: Path,
        threads: int = 8,
    ) -> None:
        self.dirs = FleetDirs(state_dir)
        self._dra = PodDRA(
            kube, plugin=self.plugin, containers_dir=self.dirs.containers, cdi_root=self.dirs.cdi
        )
        self.nodes = Nodes(
            inventory,
            lambda name: driver.node(
                name,
                inventory,
                dirs=NodeDirs(cdi_root=self.dirs.cdi(name), plugin_dir=self.dirs.plugin(name)),
                get_claim=self._dra.get_claim,
                quiet=True,
            ),
            accept=is_simulated,
        )
        self.host = Host(kube, emulation, self.nodes, writers=threads, resync_seconds=RESYNC_SECONDS)
        self.kubelet = FleetKubelet(kube, self._dra, threads=threads)

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: follow the nodes and the inventory, publish, prepare. Returns when stopped."""
        self.host.start(stop)
        # The pod watch acts on the nodes it knows: started once the nodes are listed.
        while not self.nodes.synced.wait(1.0):
            if stop.is_set():
                return
        threading.Thread(target=self.kubelet.run, args=(stop,), name="pods", daemon=True).start()
        stop.wait()

    def plugin(self, node: str) -> NodePlugin | None:
        """The driver on `node`, None when it is not a node of the fleet."""
        return self.nodes.get(node)
