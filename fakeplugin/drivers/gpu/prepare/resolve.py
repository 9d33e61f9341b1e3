"""What one claim asks of this node, resolved outside the node lock (prepare.preparer's first step).

A claim as the runtime read and checked it (runtime.claims) → the devices of ours its allocation names on
this node → injected faults (faults.claimfaults; a delay waits here, in the caller's thread) → the pool's
devices for them. Then, for the
steps under the lock: the claim's normalized configs (the overlap check of prepare.overlap, with
consumable shares) and the settings its opaque configs apply (prepare.opaqueconfig).

Every failure is a `ClaimError` with the real driver's text for that claim (prepare.claimfiles
`prepare_error`), so one claim's failure never touches another's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from fakeplugin.drivers.gpu.prepare import opaqueconfig
from fakeplugin.drivers.gpu.prepare.claimfiles import prepare_error
from fakeplugin.drivers.gpu.prepare.opaqueconfig import DeviceConfig
from fakeplugin.drivers.gpu.prepare.overlap import (
    ConfigError,
    ConfigOf,
    Configs,
    as_stored,
    normalized_configs,
    validated,
)
from fakeplugin.faults import claimfaults
from fakeplugin.model import ClaimRef, DeviceSettings, GpuDevice, PreparedDevice
from fakeplugin.releases import DriverRelease
from fakeplugin.runtime.allocation import ClaimError, allocated_devices, prepared_devices
from fakeplugin.runtime.driver import Claim


@runtime_checkable
class LiveDevices(Protocol):
    """A pool that changes under its readers (publish.node.NodeDevices): `snapshot()` is one consistent
    view of it, where reading it name by name could meet a reload halfway."""

    def snapshot(self) -> Mapping[str, GpuDevice]: ...


def pool_reader(devices: Mapping[str, GpuDevice]) -> Callable[[], Mapping[str, GpuDevice]]:
    """How a claim takes one consistent view of `devices`: a LiveDevices' snapshot, else a copy (decided
    once here: a runtime protocol check costs more than the copy)."""
    if isinstance(devices, LiveDevices):
        return devices.snapshot
    return lambda: dict(devices)


@dataclass(frozen=True)
class GpuRequest:
    """One claim to prepare, resolved against the API server and the pool before the lock is taken."""

    ref: ClaimRef
    prepared: tuple[PreparedDevice, ...]
    pool: Mapping[str, GpuDevice]  # one consistent view of the node's devices for this claim
    allocation: Mapping[str, Any]
    admin_devices: frozenset[str]  # allocated with adminAccess only (runtime.allocation.AllocatedDevice)


@dataclass(frozen=True)
class Resolver:
    """Claims of `driver_name` on the pool `node_name`, against the devices `pool()` returns (one consistent
    view, taken once per claim: see pool_reader).

    `feature_gates` and `release` rule what opaque configs may do; `shared`: consumable shares are on, so
    claims' configs are compared when they share a device. `removed()`: devices of the pool the plugin no
    longer holds (PassthroughSupport: siblings of prepared devices, publish.siblings), which fail as
    upstream fails them."""

    driver_name: str
    node_name: str
    pool: Callable[[], Mapping[str, GpuDevice]]
    faults: claimfaults.Injector
    feature_gates: Mapping[str, bool]
    release: DriverRelease
    shared: bool
    removed: Callable[[], Collection[str]] = frozenset

    def resolve(self, c: Claim) -> GpuRequest | None:
        """The claim's devices on this node, or None when none of its allocation is ours."""
        ref, claim = c.ref, c.obj
        wanted = allocated_devices(claim, ref, driver_name=self.driver_name, pool_name=self.node_name)
        if not wanted:
            return None  # nothing of ours on this node: no checkpoint entry, no CDI spec
        if failure := self.faults.prepare_failure(ref, claim):  # waits any delay first
            raise ClaimError(prepare_error(ref, failure))
        pool = self.pool()
        unknown = [name for name in wanted if name not in pool]
        if unknown and unknown[0] in self.removed():
            message = self.release.not_allocatable.format(unknown[0])
            raise ClaimError(prepare_error(ref, f"prepare devices failed: {message}"))
        if unknown:
            known = ", ".join(sorted(pool)) or "none"
            message = f"allocated device {unknown[0]} does not exist in pool {self.node_name} (has: {known})"
            raise ClaimError(prepare_error(ref, f"prepare devices failed: {message}"))
        prepared = prepared_devices(ref, wanted, pool_name=self.node_name, driver_name=self.driver_name)
        admin = frozenset(name for name, allocated in wanted.items() if allocated.admin_access)
        return GpuRequest(ref, prepared, pool, claim["status"]["allocation"], admin)

    def configs(self, r: GpuRequest) -> tuple[ConfigOf | None, Callable[[], Configs]]:
        """For the overlap check: a device's config as compared (None without consumable shares), and the
        configs for the claim's checkpoint entry. Both resolve the claim's configs once, when first asked."""
        if not self.shared:
            return None, dict

        @functools.cache
        def normalized() -> dict[str, DeviceConfig]:
            return normalized_configs(
                r.allocation,
                r.pool,
                driver_name=self.driver_name,
                pool_name=self.node_name,
                gates=self.feature_gates,
                release=self.release,
            )

        def config_of(device: str) -> Mapping[str, Any] | None:
            return validated(normalized().get(device), self.feature_gates, self.release)

        def stored() -> Configs:
            # Unresolvable configs are not stored: the claim then fails at its settings with the real
            # error, before PrepareCompleted.
            try:
                return {device: as_stored(c) for device, c in normalized().items()}
            except ConfigError:
                return {}

        return config_of, stored

    def device_settings(self, r: GpuRequest) -> dict[str, DeviceSettings]:
        """Device name → what its opaque config applied (only devices with settings)."""
        try:
            return opaqueconfig.device_settings(
                r.allocation,
                r.pool,
                driver_name=self.driver_name,
                pool_name=self.node_name,
                claim_uid=r.ref.uid,
                gates=self.feature_gates,
                release=self.release,
                consumable_shares=self.shared,
            )
        except opaqueconfig.OpaqueConfigError as e:
            raise ClaimError(prepare_error(r.ref, f"prepare devices failed: {e}")) from e
