"""The runtime's loops for the nodes a host serves: their Node informer, the inventory poll, the slice
publisher. `serve` runs them for its node beside the gRPC edge (fakeplugin.server); `fleet` for every
simulated node beside its pod watch (fakeplugin.fleet)."""

from __future__ import annotations

import threading

from fakeplugin.kube import NODES, Kube
from fakeplugin.runtime.emulation import Emulation
from fakeplugin.runtime.informer import Source, list_and_watch
from fakeplugin.runtime.nodes import Nodes
from fakeplugin.runtime.publisher import SlicePublisher


class Host:
    """`node`: serve that one Node (GET + watch by name), else every Node `nodes` accepts (list + watch)
    of those `label_selector` matches. `writers`: threads writing slices; `resync_seconds`: as
    SlicePublisher's."""

    def __init__(
        self,
        kube: Kube,
        emulation: Emulation,
        nodes: Nodes,
        *,
        node: str = "",
        writers: int = 1,
        resync_seconds: float = 30.0,
        label_selector: str = "",
    ) -> None:
        self.nodes = nodes
        self._kube = kube
        self._source = Source(NODES, name=node, label_selector=label_selector)
        self.publisher = SlicePublisher(
            kube,
            driver=emulation.driver_name,
            pools=nodes.names,
            desired=nodes.desired,
            release=emulation.release,
            node=node,
            writers=writers,
            resync_seconds=resync_seconds,
            wake=nodes.changed,
        )

    def start(self, stop: threading.Event) -> None:
        """Start the loops (daemon threads) until `stop`; the publisher once the nodes were listed."""
        for target, name in ((self._follow_nodes, "nodes"), (self.nodes.poll_inventory, "inventory")):
            threading.Thread(target=target, args=(stop,), name=name, daemon=True).start()
        threading.Thread(target=self._publish, args=(stop,), name="publisher", daemon=True).start()

    def _follow_nodes(self, stop: threading.Event) -> None:
        list_and_watch(
            self._kube,
            self._source,
            stop=stop,
            on_list=self.nodes.on_list,
            on_event=self.nodes.on_event,
            synced=self.nodes.synced,
        )

    def _publish(self, stop: threading.Event) -> None:
        while not self.nodes.synced.wait(1.0):
            if stop.is_set():
                return
        self.publisher.run(stop)
