"""`serve --gpu-operator-labels`: the plugin keeps the GPU Operator's labels of its node's inventory entry
(publish.nodelabels) on its Node, as GPU Feature Discovery and the operator keep them on a real one.

A merge patch of the Node's labels whenever the Node or the inventory changes, the keys it gave in the
annotation `fakeplugin.dev/gpu-operator-labels`: a label it gave and no longer gives (a new MIG layout, a
`gpuOperator: none`) is removed, any other label (a user's) is never touched. At close every label it gave
goes, and the annotation. GFD's timestamp is when the inventory file was written (inventory.file.written),
so an unchanged inventory never relabels and every process labelling from it (`cluster up`, the
plugins, the fleet) writes the same. Errors are logged, and the next change tries again: the labels are
not what the plugin serves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fakeplugin.drivers.gpu.publish.nodelabels import (
    OWNED_ANNOTATION,
    operator_labels,
    owned_labels_patch,
    owned_labels_removal,
)
from fakeplugin.inventory import Inventory, NodeEntry
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.runtime.driver import Obj

log = logging.getLogger(__name__)

PatchNode = Callable[[str, Obj], Obj]  # a merge patch of the Node of that name


class OperatorLabeller:
    """The GPU Operator's labels of node `node_name`, written through `patch`."""

    def __init__(self, patch: PatchNode, node_name: str, inventory: InventoryFile) -> None:
        self._patch, self._node, self._inventory = patch, node_name, inventory
        self._meta: Obj | None = None  # the Node's metadata as last seen; None before the informer's first
        # The labels of the last (inventory, entry): kwok's heartbeats and every status update are Node
        # events, and a fleet has thousands of nodes; the labels change only with these two.
        self._want: tuple[Inventory | None, NodeEntry | None, dict[str, str]] = (None, None, {})
        self._lock = threading.Lock()  # the informer and the inventory poll call in on their own threads

    def node_changed(self, meta: Obj) -> None:
        with self._lock:
            self._meta = meta
            self._sync()

    def inventory_changed(self) -> None:
        with self._lock:
            self._sync()

    def close(self) -> None:
        with self._lock:
            patch = owned_labels_removal(self._meta or {}, OWNED_ANNOTATION)
            if patch is not None:
                self._send(patch, "removing")

    def _sync(self) -> None:
        if self._meta is None:
            return
        inventory = self._inventory.inventory
        entry = inventory.node_entry(self._node, self._meta.get("labels") or {})
        if inventory is not self._want[0] or entry is not self._want[1]:  # identity: a reload is new
            stamp = self._inventory.written
            want = operator_labels(inventory, entry, timestamp=stamp) if entry else {}
            self._want = (inventory, entry, want)
        patch = owned_labels_patch(self._meta, self._want[2], OWNED_ANNOTATION)
        if patch is not None:
            self._send(patch, "setting")

    def _send(self, patch: Obj, doing: str) -> None:
        try:
            self._patch(self._node, patch)
        except Exception as e:  # the API server away or refusing: the next change tries again
            log.warning("node %s: %s the GPU Operator's labels failed: %s", self._node, doing, e)
            return
        # Until the informer brings the Node back: what the patch made of it (close needs the annotation).
        meta = dict(self._meta or {})
        for key, change in patch["metadata"].items():
            merged = {**(meta.get(key) or {}), **change}
            meta[key] = {k: v for k, v in merged.items() if v is not None}
        self._meta = meta
        changed = patch["metadata"]["labels"]
        log.info("node %s: %s the GPU Operator's labels (%d keys)", self._node, doing, len(changed))
