"""Whether a claim may have devices another prepared claim holds (pure): the real driver's overlap check.

SIGS v25.12.0, v0.4.1 and main 95932046: cmd/gpu-kubelet-plugin/device_state.go
`validateNoOverlappingPreparedDevices` (with `requestedNonAdminDevices`, prepared.go `GetNonAdminDevices`):
- only claims in PrepareCompleted count: an attempt that died midway holds nothing;
- devices allocated with admin access (runtime.allocation.AllocatedDevice) are left out on both sides;
- with consumable shares (main only) a device is shared when both claims' normalized configs for it are
  equal (`getNormalizedDeviceConfig`, compared with reflect.DeepEqual); else
  `requested device %s has conflicting configuration with already prepared claim %s`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare import opaqueconfig
from fakeplugin.model import ClaimState, GpuDevice
from fakeplugin.releases import DriverRelease

Configs = Mapping[str, Mapping[str, Any]]  # device name → {"kind", "spec"} (checkpoint.ClaimEntry.configs)
ConfigOf = Callable[[str], Mapping[str, Any] | None]  # device name → its config as compared (ConfigError)


class ConfigError(Exception):
    """The incoming claim's configs cannot be resolved; the message is the opaque-config error."""


def conflict(
    uid: str,
    devices: Collection[str],
    admin_devices: Collection[str],
    checkpoint: cp.Checkpoint,
    *,
    completed: Collection[str] = (),
    config_of: ConfigOf | None = None,
) -> str:
    """Why claim `uid` may not have `devices`: one is held by another claim; "" when none is.

    `completed`: claims to count as PrepareCompleted although the checkpoint says PrepareStarted (earlier
    claims of the same batch, which the driver's one-claim-at-a-time loop would have completed).
    `config_of`: None without consumable shares; else a device's normalized config in this claim, asked for
    only when the device overlaps (ConfigError). An entry without configs (prepared before consumable shares
    were on) never agrees.
    """
    wanted = set(devices) - set(admin_devices)
    for other_uid, other in checkpoint.claims.items():
        done = other.state is ClaimState.PREPARE_COMPLETED or other_uid in completed
        if other_uid == uid or not done:
            continue
        for device in sorted(wanted & ({d.device_name for d in other.devices} - other.admin_devices)):
            if config_of is None:
                return f"requested device {device} is already allocated to different claim {other_uid}"
            try:
                mine = config_of(device)
            except ConfigError as e:
                return f"error resolving config for incoming claim {uid} on device {device}: {e}"
            if mine is None or other.configs.get(device) != mine:
                return (
                    f"requested device {device} has conflicting configuration with already prepared "
                    f"claim {other_uid}"
                )
    return ""


def normalized_configs(
    allocation: Mapping[str, Any],
    devices: Mapping[str, GpuDevice],
    *,
    driver_name: str,
    pool_name: str,
    gates: Mapping[str, bool],
    release: DriverRelease,
) -> dict[str, opaqueconfig.DeviceConfig]:
    """Device name → its effective, normalized opaque config (main 95932046 device_state.go
    getConfigResultsMap: every config of the claim decoded). ConfigError: the configs are unusable."""
    try:
        return opaqueconfig.effective_configs(
            allocation, devices, driver_name=driver_name, pool_name=pool_name, gates=gates, release=release
        )
    except opaqueconfig.OpaqueConfigError as e:
        raise ConfigError(str(e)) from e


def as_stored(config: opaqueconfig.DeviceConfig) -> dict[str, Any]:
    """What the overlap check compares of a config (reflect.DeepEqual of the config object): kind and spec."""
    return {"kind": config.kind, "spec": dict(config.spec)}


def validated(
    config: opaqueconfig.DeviceConfig | None, gates: Mapping[str, bool], release: DriverRelease
) -> dict[str, Any] | None:
    """The device's config as compared, once valid (getNormalizedDeviceConfig → normalizeAndValidateConfig
    validates the one config of the overlapping device). ConfigError: it is not."""
    if config is None:
        return None
    if problem := opaqueconfig.validation_problem(config, gates, release):
        raise ConfigError(f"error validating config: {problem}")
    return as_stored(config)
