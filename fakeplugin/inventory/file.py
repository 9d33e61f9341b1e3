"""The inventory file as a running process follows it: re-read when its content changes, the last good
inventory kept when an edit is broken. Read by the plugin runtime (runtime.nodes) for every node it serves
and by the fleet once for all its nodes.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from fakeplugin.inventory.fields import MAX_FILE_BYTES
from fakeplugin.inventory.model import Inventory
from fakeplugin.inventory.parse import InventoryError, load_inventory

log = logging.getLogger(__name__)


class InventoryFile:
    """The inventory file, re-read when its content changes. One may serve many `NodeDevices` (the fleet
    reads the file once for all its nodes). Invariant: a broken edit never replaces a good inventory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._digest = self._file_digest()
        self.written = written(path)
        self.inventory: Inventory = load_inventory(path)  # the first load raises InventoryError

    def reload_if_changed(self) -> bool:
        """True when a changed, valid file took effect; a broken edit is logged (once) and changes nothing."""
        digest = self._file_digest()
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            stamp = written(self.path)
            self.inventory = load_inventory(self.path)
        except InventoryError as exc:
            log.error("inventory %s changed but is invalid; keeping the previous one:\n%s", self.path, exc)
            return False
        self.written = stamp
        log.info("inventory %s changed; reloaded", self.path)
        return True

    def _file_digest(self) -> str:
        with open(self.path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)  # a larger file is refused by load_inventory; never held whole
        return hashlib.sha256(data).hexdigest()


def written(path: Path) -> int:
    """When the file was last written, in seconds since the epoch: the moment its inventory took effect,
    the same for every process that reads it (GPU Feature Discovery's `gfd.timestamp` of its nodes)."""
    return int(path.stat().st_mtime)
