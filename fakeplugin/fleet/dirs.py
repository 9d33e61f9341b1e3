"""Where a fleet keeps each simulated node's files: the layout of a kubelet's root, one per node, under the
fleet's nodes dir (a leaf: the fleet makes it, the reconciler removes gone nodes' dirs through it)."""

from __future__ import annotations

from pathlib import Path


class FleetDirs:
    """<root>/<node>/ (root: the fleet's --nodes-dir): a simulated node's CDI root, each driver's plugin
    dir (checkpoint, nvidia-smi data) and container records."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def node(self, name: str) -> Path:
        return self.root / name

    def cdi(self, name: str) -> Path:
        return self.node(name) / "cdi"

    def plugin(self, name: str, driver: str) -> Path:
        return self.node(name) / "plugins" / driver

    def containers(self, name: str) -> Path:
        return self.node(name) / "containers"
