"""The contract between the runtime and a DRA driver: what a driver does on a node, and nothing else.

As upstream's kubeletplugin helper puts it, the runtime registers with the kubelet, serves the DRA
services, keeps the published ResourceSlices in place and retries; a driver only says what a node
publishes and how it prepares and unprepares claims. `serve` hosts one node, `fleet` every simulated node;
both ask the same `Driver` for the same `NodePlugin`s (fakeplugin.drivers holds the drivers).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fakeplugin.model import ClaimRef, PrepareResult

if TYPE_CHECKING:
    from fakeplugin.inventory.file import InventoryFile
    from fakeplugin.runtime.emulation import Emulation

Obj = dict[str, Any]
# The claim read Prepare makes: (namespace, name) → the ResourceClaim object.
GetClaim = Callable[[str, str], Obj]


class Claims(Protocol):
    """Prepare and unprepare, as the gRPC edge (fakeplugin.server) and the fleet's pods call them. Both
    block (API calls, file locks): callers run them in worker threads, never on an event loop."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare the claims; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare the claims; the result maps claim UID to an error ("" = success)."""
        ...


class NodePlugin(Claims, Protocol):
    """A driver on one node: what it publishes there, how it prepares there."""

    @property
    def node_name(self) -> str: ...

    @property
    def devices(self) -> Collection[str]:
        """The names of the devices it publishes now (live: read for every health report)."""
        ...

    def set_node(self, node: Obj) -> bool:
        """The Node object as the API server shows it now (labels, UID, annotations); True when the
        desired slices may have changed. ValueError: the node's inventory entry cannot make devices."""
        ...

    def refresh(self) -> bool:
        """The inventory file changed (runtime.nodes reloaded it); True when the desired slices may
        have changed."""
        ...

    def desired_slices(self, server_version: tuple[int, int]) -> list[Obj]:
        """This node's ResourceSlices (its pool), laid out for an API server of `server_version`; only
        asked once `set_node` has run."""
        ...

    def health_of(self, device: str) -> tuple[bool, str] | None:
        """An injected fault of the device (healthy, message), None when it has none."""
        ...

    def open(self) -> None:
        """Make the prepare side ready (node lock, stale files, checkpoint); idempotent. `serve` calls it
        at start, where a failure is fatal; prepare and unprepare call it on first use."""
        ...

    def prepared_claims(self) -> list[ClaimRef]:
        """The claims prepared on this node (its checkpoint), e.g. for a pod deleted while we were down."""
        ...


@dataclass(frozen=True)
class NodeDirs:
    """Where a node's prepare side keeps its files: the CDI specs the runtime reads, and the plugin's own
    directory (checkpoint, lock, call log)."""

    cdi_root: Path
    plugin_dir: Path


class Driver(Protocol):
    """A DRA driver: makes its NodePlugin for a node."""

    @property
    def name(self) -> str:
        """The DRA driver name (e.g. gpu.nvidia.com)."""
        ...

    @property
    def emulation(self) -> Emulation:
        """What it emulates (its name, release and gates), for the runtime's publisher."""
        ...

    def node(
        self,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> NodePlugin:
        """The driver on `node_name`, reading the shared `inventory`.
        `quiet`: one of many (a fleet): per-node lines at debug. ValueError names the inventory entry
        whose devices cannot be made."""
        ...
