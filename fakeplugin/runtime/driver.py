"""The contract between the runtime and a DRA driver: what a driver does on a node, and nothing else.

As upstream's kubeletplugin helper puts it (k8s.io/dynamic-resource-allocation v0.34.0,
kubeletplugin/draplugin.go: the `DRAPlugin` interface, PrepareResourceClaims(ctx, []*ResourceClaim) and
UnprepareResourceClaims(ctx, []NamespacedObject)), the runtime registers with the kubelet, serves the DRA
services, keeps the published ResourceSlices in place, reads the claims to prepare and checks them
(runtime.claims), and owns the node's boot ID (runtime.bootid); a driver says what a node publishes
(`Publishing`) and how it prepares and unprepares claims there (`Preparing`). `serve` hosts one node,
`fleet` every simulated node; both ask the same `Driver` for the same `NodePlugin`s (fakeplugin.drivers
holds the drivers).

Invariant: making a NodePlugin does no I/O (no file, no lock, no API call); `Preparing.open` does.

Optional capabilities (`DeviceHealth`, `DeviceStates`): what only some drivers' nodes can do, asked of a
NodePlugin by the host that needs it (`isinstance(plugin, DeviceHealth)`), never by the driver's type.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fakeplugin.model import ClaimRef, GpuDevice, PrepareResult

if TYPE_CHECKING:
    from fakeplugin.inventory.file import InventoryFile
    from fakeplugin.runtime.emulation import Emulation

Obj = dict[str, Any]
# A claim read: (namespace, name) → the ResourceClaim object.
GetClaim = Callable[[str, str], Obj]


@dataclass(frozen=True)
class Claim:
    """A claim to prepare as the runtime read it: `obj` is the ResourceClaim, allocated, its UID the ref's."""

    ref: ClaimRef
    obj: Obj


class Claims(Protocol):
    """Prepare and unprepare by claim reference, as the gRPC edge (fakeplugin.server) calls them
    (runtime.claims.CheckedClaims). Both block (API calls, file locks): callers run them in worker
    threads, never on an event loop."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare the claims; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare the claims; the result maps claim UID to an error ("" = success)."""
        ...


class Publishing(Protocol):
    """What a driver publishes on one node: its devices, its slices, their health."""

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


class Preparing(Protocol):
    """How a driver prepares claims on one node. prepare and unprepare block (file locks, the driver's
    own API calls) and open on first use."""

    def open(self) -> None:
        """Make the prepare side ready (node lock, stale files, checkpoint); idempotent. `serve` calls it
        at start, where a failure is fatal; prepare, unprepare and prepared_claims call it on first use."""
        ...

    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        """Prepare the claims the runtime read and checked; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare the claims (references the runtime checked); claim UID → error ("" = success)."""
        ...

    def prepared_claims(self) -> list[ClaimRef]:
        """The claims prepared on this node (its checkpoint), e.g. for a pod deleted while we were down."""
        ...

    def close(self) -> None:
        """The host stops: undo what only a running plugin keeps (e.g. a node label); idempotent."""
        ...


class NodePlugin(Publishing, Preparing, Protocol):
    """A driver on one node: what it publishes there, how it prepares there."""


# -- optional capabilities of a NodePlugin ----------------------------------------------------------------
#
# As upstream's helper asks a driver for its optional services (kubeletplugin/draplugin.go `Start`: the
# DRAResourceHealth service is registered only `if healthServer, ok := plugin.(DRAResourceHealthServer)`),
# a host asks a NodePlugin for a capability with `isinstance(plugin, <capability>)`: a Go type assertion's
# Python form (structural: the methods are there). A driver gains one by implementing its methods; one
# without it says nothing (no method every driver must answer None to), and no host names a driver's node
# type. The check is by name only, so a capability's method names are kept distinctive.
# A fault is the driver's injected fault of a device (faults.devicefaults.DeviceFault for the GPU driver;
# the contract, below the parts, does not name it).
Fault = Any


@runtime_checkable
class DeviceHealth(Protocol):
    """Optional: each device's health, for the kubelet's DRA health service (`serve --device-health`,
    fakeplugin.server.device_health). The GPU driver's nodes have it; ComputeDomain nodes do not (PR #1243:
    `HealthService(false)`)."""

    @property
    def node_name(self) -> str: ...

    @property
    def devices(self) -> Collection[str]: ...

    def health_state(self, device: str) -> tuple[str, Fault | None] | None:
        """The device's kind (faults.devicehealth.kind) and its injected fault; None once it is gone."""
        ...


@runtime_checkable
class DeviceStates(Protocol):
    """Optional: the node's GPUs as hardware at one moment, with their injected faults, for dcgm-exporter's
    `/metrics` (fakeplugin.telemetry, `serve` and `fleet --telemetry-endpoint`). The GPU driver's nodes
    have it; ComputeDomain nodes, which have no GPUs of their own, do not."""

    @property
    def node_name(self) -> str: ...

    def device_state(self) -> tuple[Mapping[str, GpuDevice], Mapping[str, Fault]]:
        """The devices by name and the faults by device name, read together (one consistent state)."""
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
        boot_id: str,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> NodePlugin:
        """The driver on `node_name`, reading the shared `inventory`; no I/O (see the module docstring).
        `boot_id`: this boot's (runtime.bootid), for the checkpoint. `get_claim`: for the driver's own claim
        reads (injected unprepare faults, a start's cleanup); Prepare's claims come read and checked.
        `quiet`: one of many (a fleet): per-node lines at debug. ValueError names the inventory entry whose
        devices cannot be made."""
        ...
