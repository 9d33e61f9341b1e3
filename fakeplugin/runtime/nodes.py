"""The nodes a host serves, each a driver's NodePlugin: following their Node objects and the inventory.

`serve` serves one node (made at start, so its devices are known before the API server answers);
`fleet` every Node that `accept`s (kwok's). Both read one inventory file (inventory.file.InventoryFile),
polled here; a change is handed to every node (`NodePlugin.refresh`), and whoever publishes is woken.

Invariants: a node is asked for its slices only once its Node object was seen (slices are owned by it);
one plugin per node name until `forget` (one prepare side per node's files: forgotten when they go).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fakeplugin.inventory.file import InventoryFile
from fakeplugin.kube import Obj
from fakeplugin.runtime.driver import NodePlugin

log = logging.getLogger(__name__)

INVENTORY_POLL_SECONDS = 5.0


class Nodes:
    """`make(name)`: the driver's plugin for a node (ValueError: its entry cannot make devices);
    `accept(node)`: whether a Node object is one of ours; `changed` is set when what some node publishes
    may have changed."""

    def __init__(
        self,
        inventory: InventoryFile,
        make: Callable[[str], NodePlugin],
        *,
        accept: Callable[[Obj], bool] = lambda _: True,
    ) -> None:
        self.inventory = inventory
        self._make = make
        self._accept = accept
        self._mutex = threading.Lock()
        self._plugins: dict[str, NodePlugin] = {}
        self._seen: set[str] = set()  # nodes whose Node object was seen: they publish
        self.changed = threading.Event()
        self.synced = threading.Event()  # set by the informer after its first list

    def add(self, name: str) -> NodePlugin:
        """The plugin of `name`, made now if it is new (ValueError as `make`)."""
        with self._mutex:
            plugin = self._plugins.get(name)
        if plugin is None:
            plugin = self._make(name)
            with self._mutex:
                plugin = self._plugins.setdefault(name, plugin)
        return plugin

    def get(self, name: str) -> NodePlugin | None:
        """The plugin of a node we serve and have seen, else None."""
        with self._mutex:
            return self._plugins.get(name) if name in self._seen else None

    def names(self) -> list[str]:
        with self._mutex:
            return sorted(self._seen)

    def desired(self, name: str, server_version: tuple[int, int]) -> list[Obj] | None:
        """The desired slices of node `name`; None unless it is a node seen (one we publish for)."""
        plugin = self.get(name)
        return None if plugin is None else plugin.desired_slices(server_version)

    # -- the informer's callbacks ---------------------------------------------------------------------

    def on_list(self, nodes: list[Obj]) -> None:
        listed = {n["metadata"]["name"] for n in nodes}
        for gone in set(self.names()) - listed:
            self._drop(gone)
        if any([self._seen_node(n) for n in nodes]):
            self.changed.set()

    def on_event(self, kind: str, node: Obj) -> None:
        changed = self._drop(node["metadata"]["name"]) if kind == "DELETED" else self._seen_node(node)
        if changed:
            self.changed.set()

    def _seen_node(self, node: Obj) -> bool:
        name = node["metadata"]["name"]
        if not self._accept(node):
            return self._drop(name)
        try:
            plugin = self.add(name)
            changed = plugin.set_node(node)
        except ValueError as exc:  # this node's entry cannot make devices: the others still can
            log.error("node %s: %s", name, exc)
            return False
        with self._mutex:
            new = name not in self._seen
            self._seen.add(name)
        return changed or new

    def _drop(self, name: str) -> bool:
        # The plugin stays: its prepare side may be serving calls, and a node that comes back soon is
        # the same node (its checkpoint and files are where they were) until `forget`.
        with self._mutex:
            seen = name in self._seen
            self._seen.discard(name)
            return seen

    def forget(self, name: str) -> None:
        """Drop the plugin of a node no longer seen, whose files are being removed (a fleet's node that
        was deleted): a node of that name seen again later gets a new one."""
        with self._mutex:
            if name not in self._seen:
                self._plugins.pop(name, None)

    def close(self) -> None:
        """The host stops: every plugin made is closed (runtime.driver.Preparing.close)."""
        with self._mutex:
            plugins = list(self._plugins.values())
        for plugin in plugins:
            plugin.close()

    # -- the inventory --------------------------------------------------------------------------------

    def poll_inventory(self, stop: threading.Event) -> None:
        """Until `stop`: re-read the inventory file when it changed, and hand it to every node."""
        while not stop.wait(INVENTORY_POLL_SECONDS):
            try:
                if not self.inventory.reload_if_changed():
                    continue
            except OSError as exc:  # e.g. a ConfigMap symlink swap in progress: next time
                log.warning("reading inventory failed: %s", exc)
                continue
            with self._mutex:
                plugins = list(self._plugins.values())
            if any([p.refresh() for p in plugins]):
                self.changed.set()
