"""NVIDIA's opaque device configuration (`resource.nvidia.com/v1beta1`), read as the real plugin reads it.

Pure: claim allocation (API shape) + this node's devices + feature gates + driver release → per device, the
effective config and the settings it applies; or a `OpaqueConfigError` whose message is the real driver's
error chain below `prepare devices failed: ` (kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0 and v0.4.1:
cmd/gpu-kubelet-plugin/device_state.go, api/nvidia.com/resource/v1beta1/{api,gpuconfig,migconfig,sharing,
validate,vfiodeviceconfig}.go). What differs by release (fakeplugin.releases):
25.12 gives configs without `sharing` an implicit TimeSlicing while TimeSlicingSettings is on, its validation
messages are terse (`unknown GPU sharing strategy: MPS` also for a strategy whose gate is off), and its
VfioDeviceConfig has no `iommu`; 0.4.1 (PR #1183) has no implicit TimeSlicing, the messages below and `iommu`.

1. `status.allocation.devices.config[]` (`DeviceAllocationConfiguration{source, requests, opaque}`): class
   configs, then claim configs (another `source` ⇒ `invalid config source`); an entry without `opaque` ⇒
   `only opaque parameters are supported by this driver` (checked before the driver, as upstream); configs of
   other drivers skipped; the rest strictly decoded (`error decoding config parameters: ...`: unknown fields ⇒
   `strict decoding error: unknown field "a.b"`, wrong JSON types ⇒ Go's `json: cannot unmarshal ...`, bad
   quantities ⇒ the quantity parser's error).
2. Precedence, per allocation result of ours (driver and pool), walking the list backwards down to the
   implicit defaults `GpuConfig{}` and `MigDeviceConfig{}`: a config whose `requests` name the result's
   request (exactly, as upstream: `req` does not match `req/sub`) wins, a kind that does not fit the device
   type is an error; a config with empty `requests` wins only if its kind fits. Whole objects, no merging.
3. Normalization (gated as upstream): TimeSlicing ⇒ `timeSlicingConfig.interval: Default` when missing; MPS
   ⇒ `mpsConfig: {}`. Implicit TimeSlicing for configs without `sharing` only in 25.12 (see above).
4. Per group of results sharing one config object: validation (`error validating GPU config: ...`), then
   the effects (`error applying config: ...`): TimeSlicing ⇒ the interval on full GPUs; MPS ⇒ a control
   daemon `mps-control-daemon-<claimUID>-<5 hex of sha256(sorted UUIDs)>`, its thread percentage,
   pinned-memory limits (`<MiB>M`) and multi-user mode.

Decisions of the fake:
- `VfioDeviceConfig` is decoded strictly whatever PassthroughSupport says (upstream always registers the
  kind); it fits `vfio` devices only (published with PassthroughSupport, which also adds the implicit
  lowest-precedence `VfioDeviceConfig{iommu: {backendPolicy: LegacyOnly}}`: vfiodeviceconfig.go
  DefaultVfioDeviceConfig), and naming a GPU request with it is the kind-mismatch error. Its effect is the
  claim's CDI edits (prepare.cdispec), kept as DeviceSettings `iommu_*` (v0.4.0+ iommu.go: Normalize fills
  LegacyOnly and enableAPIDevice false, Validate knows LegacyOnly and PreferIommuFD). Compute-domain kinds
  are unknown here (upstream: decoded, then `runtime object is not a recognized configuration`): they get
  the unregistered-kind error.
- `timeSlicingConfig: {}` normalizes to `interval: Default` (upstream dereferences the missing interval).
- `mpsConfig.multiUser` is accepted in every release although it came after v0.4.1 (upstream main).
- Go's `%v` of a Quantity pointer (pinned-memory errors) is rendered as the quantity text; the scheme name in
  unregistered-kind errors (`SCHEME_NAME`) approximates Go's call-site name.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fakeplugin import quantity, releases, scheme
from fakeplugin.apis.computedomain import API_VERSION
from fakeplugin.model import DeviceSettings, GpuDevice
from fakeplugin.releases import DriverRelease
from fakeplugin.scheme import GPU_CONFIG, MIG_DEVICE_CONFIG, SCHEME_NAME, VFIO_DEVICE_CONFIG

GROUP_VERSION = API_VERSION  # resource.nvidia.com/v1beta1, the ComputeDomain kinds' too

TIME_SLICING = "TimeSlicing"
MPS = "MPS"
INTERVALS = ("Default", "Short", "Medium", "Long")
MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # what the real driver mounts and exports as CUDA_MPS_PIPE_DIRECTORY
MULTI_USER_MIN_CAPABILITY = "7.0"  # Volta
LEGACY_ONLY = "LegacyOnly"
PREFER_IOMMUFD = "PreferIommuFD"
IOMMU_BACKEND_POLICIES = (LEGACY_ONLY, PREFER_IOMMUFD)

SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"
SOURCE_DEFAULT = "Default"  # the implicit lowest-precedence configs

# Which device type each config kind fits.
_DEVICE_TYPE = {GPU_CONFIG: "gpu", MIG_DEVICE_CONFIG: "mig", VFIO_DEVICE_CONFIG: "vfio"}


class OpaqueConfigError(Exception):
    """The claim's opaque configs cannot be applied; the message is the real driver's error chain."""


# ---------------------------------------------------------------------------------------------------------
# Results.


@dataclass(frozen=True)
class DeviceConfig:
    """The config that applies to one device: kind and its parameters (without apiVersion/kind), normalized.

    `group` is the config's position in the precedence list (implicit defaults first); devices with the same
    group share one config object and, like the real driver's prepared-device groups, one set of effects.
    """

    kind: str
    spec: Mapping[str, Any]
    source: str
    requests: tuple[str, ...]
    group: int


def effective_configs(
    allocation: Mapping[str, Any],
    devices: Mapping[str, GpuDevice],
    *,
    driver_name: str,
    pool_name: str,
    gates: Mapping[str, bool],
    release: DriverRelease | None = None,
) -> dict[str, DeviceConfig]:
    """Device name → its effective, normalized config, for the allocation results of ours (driver and pool).

    Devices of a type no config fits (none today) are left out, as upstream leaves them unprepared.
    `release`: the emulated driver release (default: the default release).
    """
    release = release or releases.get(None)
    defaults = [(MIG_DEVICE_CONFIG, {}), (GPU_CONFIG, {})]
    if gates.get("PassthroughSupport"):  # device_state.go GetOpaqueDeviceConfigs: after the other defaults
        defaults.append((VFIO_DEVICE_CONFIG, {}))
    candidates = [
        *(_Candidate(SOURCE_DEFAULT, (), kind, spec) for kind, spec in defaults),
        *_opaque_configs(allocation, driver_name, release),
    ]
    chosen: dict[str, DeviceConfig] = {}
    for request, name in _our_results(allocation, driver_name, pool_name):
        device = devices.get(name)
        if device is None:
            raise OpaqueConfigError(release.not_allocatable.format(name))
        for index in reversed(range(len(candidates))):
            c = candidates[index]
            fits = _DEVICE_TYPE[c.kind] == device.type
            if request in c.requests and not fits:
                raise OpaqueConfigError(
                    f"cannot apply {c.kind} to device {_q(name)} of type {_q(device.type)} "
                    f"(request: {request})"
                )
            if request in c.requests or (not c.requests and fits):
                spec = _normalize(c.kind, c.spec, gates, release)
                chosen[name] = DeviceConfig(c.kind, spec, c.source, c.requests, index)
                break
    return chosen


def device_settings(
    allocation: Mapping[str, Any],
    devices: Mapping[str, GpuDevice],
    *,
    driver_name: str,
    pool_name: str,
    claim_uid: str,
    gates: Mapping[str, bool],
    release: DriverRelease | None = None,
    consumable_shares: bool = False,
) -> dict[str, DeviceSettings]:
    """Device name → the settings its effective config applies; devices without any are left out.

    Validates and applies one config group at a time, groups in the order their first device was allocated.
    `consumable_shares`: the plugin runs with consumable shares (fakeplugin.consumableshares): no MPS.
    """
    release = release or releases.get(None)
    configs = effective_configs(
        allocation, devices, driver_name=driver_name, pool_name=pool_name, gates=gates, release=release
    )
    requests: dict[int, list[str]] = {}
    for request, name in _our_results(allocation, driver_name, pool_name):
        if name in configs:
            requests.setdefault(configs[name].group, []).append(request)
    settings: dict[str, DeviceSettings] = {}
    for group, group_requests in requests.items():
        members = [devices[name] for name, c in configs.items() if c.group == group]
        config = next(c for c in configs.values() if c.group == group)
        problem = validation_problem(config, gates, release)
        if problem:
            raise OpaqueConfigError(f"error validating GPU config: {problem}")
        try:
            settings.update(_apply(config, members, group_requests, claim_uid, gates, consumable_shares))
        except _ApplyError as e:
            raise OpaqueConfigError(f"error applying config: {e}") from None
    return settings


# ---------------------------------------------------------------------------------------------------------
# Step 1: the allocation's configs of this driver, decoded strictly.


@dataclass(frozen=True)
class _Candidate:
    source: str
    requests: tuple[str, ...]
    kind: str
    spec: Mapping[str, Any]


def _opaque_configs(
    allocation: Mapping[str, Any], driver_name: str, release: DriverRelease
) -> list[_Candidate]:
    entries = (allocation.get("devices") or {}).get("config") or []
    by_source: dict[str, list[Mapping[str, Any]]] = {SOURCE_CLASS: [], SOURCE_CLAIM: []}
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise OpaqueConfigError(
                f"status.allocation.devices.config[{i}]: expected an object, got {entry!r}"
            )
        source = entry.get("source")
        if source not in by_source:
            raise OpaqueConfigError(
                f"error getting opaque device configs: invalid config source: {source or ''}"
            )
        by_source[source].append(entry)
    candidates = []
    for source, source_entries in by_source.items():
        for entry in source_entries:
            opaque = entry.get("opaque")
            if not isinstance(opaque, Mapping):
                raise OpaqueConfigError(
                    "error getting opaque device configs: only opaque parameters are supported by this driver"
                )
            if opaque.get("driver") != driver_name:
                continue  # one request may be satisfiable by several drivers: skip the others' configs
            try:
                kind, spec = decode(opaque.get("parameters"), release)
            except _DecodeError as e:
                raise OpaqueConfigError(
                    f"error getting opaque device configs: error decoding config parameters: {e}"
                ) from None
            candidates.append(_Candidate(source, tuple(entry.get("requests") or ()), kind, spec))
    return candidates


def _our_results(allocation: Mapping[str, Any], driver_name: str, pool_name: str) -> list[tuple[str, str]]:
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        (r["request"], r["device"])
        for r in results
        if isinstance(r, Mapping) and r.get("driver") == driver_name and r.get("pool") == pool_name
    ]


_DecodeError = scheme.DecodeError


@dataclass(frozen=True)
class _Struct:
    go_name: str
    fields: Mapping[str, _Field]


@dataclass(frozen=True)
class _Field:
    json_type: str  # string | int | bool | quantity | quantities (map of quantities) | object
    go_type: str  # as Go's reflect prints it, for type errors
    struct: _Struct | None = None


_TYPE_META = {"apiVersion": _Field("string", "string"), "kind": _Field("string", "string")}
_MPS_CONFIG = _Struct(
    "MpsConfig",
    {
        "defaultActiveThreadPercentage": _Field("int", "int"),
        "defaultPinnedDeviceMemoryLimit": _Field("quantity", "resource.Quantity"),
        "defaultPerDevicePinnedMemoryLimit": _Field("quantities", "v1beta1.MpsPerDevicePinnedMemoryLimit"),
        "multiUser": _Field("bool", "bool"),
    },
)
_STRATEGY = _Field("string", "v1beta1.GpuSharingStrategy")
_MPS_FIELD = _Field("object", "v1beta1.MpsConfig", _MPS_CONFIG)
_TIME_SLICING = _Struct("TimeSlicingConfig", {"interval": _Field("string", "v1beta1.TimeSliceInterval")})
_GPU_SHARING = _Struct(
    "GpuSharing",
    {
        "strategy": _STRATEGY,
        "timeSlicingConfig": _Field("object", "v1beta1.TimeSlicingConfig", _TIME_SLICING),
        "mpsConfig": _MPS_FIELD,
    },
)
_MIG_SHARING = _Struct("MigDeviceSharing", {"strategy": _STRATEGY, "mpsConfig": _MPS_FIELD})
_IOMMU = _Struct(
    "IOMMUConfig",
    {
        "backendPolicy": _Field("string", "v1beta1.IOMMUBackendPolicy"),
        "enableAPIDevice": _Field("bool", "bool"),
    },
)
_VFIO_25_12 = _Struct(VFIO_DEVICE_CONFIG, dict(_TYPE_META))  # no `iommu` before v0.4.0
KINDS: dict[str, _Struct] = {
    GPU_CONFIG: _Struct(
        GPU_CONFIG, {**_TYPE_META, "sharing": _Field("object", "v1beta1.GpuSharing", _GPU_SHARING)}
    ),
    MIG_DEVICE_CONFIG: _Struct(
        MIG_DEVICE_CONFIG,
        {**_TYPE_META, "sharing": _Field("object", "v1beta1.MigDeviceSharing", _MIG_SHARING)},
    ),
    VFIO_DEVICE_CONFIG: _Struct(
        VFIO_DEVICE_CONFIG, {**_TYPE_META, "iommu": _Field("object", "v1beta1.IOMMUConfig", _IOMMU)}
    ),
}
_INT64 = range(-(2**63), 2**63)


def decode(parameters: Any, release: DriverRelease | None = None) -> tuple[str, dict[str, Any]]:
    """(kind, parameters without apiVersion/kind and nulls), decoded as upstream's strict decoder of
    `release` (default: the default release) does."""
    group, version, kind = scheme.type_meta(parameters)
    if f"{group}/{version}" != GROUP_VERSION or kind not in KINDS:
        raise scheme.not_registered(group, version, kind, SCHEME_NAME)
    struct = KINDS[kind]
    if kind == VFIO_DEVICE_CONFIG and not (release or releases.get(None)).vfio_iommu_config:
        struct = _VFIO_25_12
    walk = _Walk()
    spec = walk.struct(parameters, struct, ())
    if walk.type_error:
        raise _DecodeError(walk.type_error)
    if walk.unknown:
        raise _DecodeError("strict decoding error: " + ", ".join(walk.unknown))
    return kind, {k: v for k, v in spec.items() if k not in _TYPE_META}


class _Walk:
    """One strict decode: Go keeps the first type error and goes on; quantity errors stop it at once."""

    def __init__(self) -> None:
        self.type_error = ""
        self.unknown: list[str] = []

    def struct(self, obj: Mapping[str, Any], struct: _Struct, path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in obj.items():
            field = struct.fields.get(key)
            where = (*path, key)
            if field is None:
                self.unknown.append(f"unknown field {_q('.'.join(where))}")
            elif value is not None:  # JSON null leaves a Go field at its zero value
                decoded = self.value(value, field, struct.go_name, where)
                if decoded is not None:
                    out[key] = decoded
        return out

    def value(self, value: Any, field: _Field, struct_name: str, where: tuple[str, ...]) -> Any:
        if field.json_type == "quantity":
            quantity_bytes(value)
            return value
        if field.json_type == "quantities" and isinstance(value, Mapping):
            for item in value.values():
                if item is not None:
                    quantity_bytes(item)
            return {k: v for k, v in value.items() if v is not None}
        if field.json_type == "object" and isinstance(value, Mapping):
            assert field.struct is not None
            return self.struct(value, field.struct, where)
        if _json_fits(value, field.json_type):
            return value
        if not self.type_error:
            shown = scheme.json_type(value)
            if shown == "number" and field.json_type == "int":
                shown = f"number {value}"
            self.type_error = (
                f"json: cannot unmarshal {shown} into Go struct field {struct_name}.{'.'.join(where)} "
                f"of type {field.go_type}"
            )
        return None


def _json_fits(value: Any, json_type: str) -> bool:
    if json_type == "string":
        return isinstance(value, str)
    if json_type == "bool":
        return isinstance(value, bool)
    if json_type == "int":
        return isinstance(value, int) and not isinstance(value, bool) and value in _INT64
    return False


def quantity_bytes(value: Any) -> int:
    """A Quantity field's `Value()` (fakeplugin.quantity), as the JSON decoder takes it: a number or a
    string, spaces trimmed. Raises the parser's errors (as _DecodeError)."""
    text = str(value).strip() if isinstance(value, str | int | float) and not isinstance(value, bool) else ""
    try:
        return quantity.value(text)
    except quantity.QuantityError as e:
        raise _DecodeError(str(e)) from None


# ---------------------------------------------------------------------------------------------------------
# Step 3 and 4: normalization, validation, effects.


def _normalize(
    kind: str, spec: Mapping[str, Any], gates: Mapping[str, bool], release: DriverRelease
) -> dict[str, Any]:
    out = json.loads(json.dumps(spec))  # a private copy: the defaults must never change the decoded configs
    if kind == VFIO_DEVICE_CONFIG and release.vfio_iommu_config:
        iommu = out.setdefault("iommu", {})
        iommu["backendPolicy"] = iommu.get("backendPolicy") or LEGACY_ONLY
        iommu.setdefault("enableAPIDevice", False)
    implicit = release.implicit_time_slicing and gates.get("TimeSlicingSettings")
    if implicit and kind in (GPU_CONFIG, MIG_DEVICE_CONFIG) and out.get("sharing") is None:
        out["sharing"] = {"strategy": TIME_SLICING}
    sharing = out.get("sharing")
    if kind not in (GPU_CONFIG, MIG_DEVICE_CONFIG) or sharing is None:
        return out
    strategy = sharing.get("strategy")
    if kind == GPU_CONFIG and gates.get("TimeSlicingSettings") and strategy == TIME_SLICING:
        sharing.setdefault("timeSlicingConfig", {}).setdefault("interval", "Default")
    if gates.get("MPSSupport") and strategy == MPS:
        sharing.setdefault("mpsConfig", {})
    return out


def validation_problem(config: DeviceConfig, gates: Mapping[str, bool], release: DriverRelease) -> str:
    """The real `Validate()` message, or "" when valid."""
    policy = config.spec.get("iommu", {}).get("backendPolicy", LEGACY_ONLY)
    if config.kind == VFIO_DEVICE_CONFIG and policy not in IOMMU_BACKEND_POLICIES:
        return (
            f"unknown IOMMU backend policy: {policy}, "
            f"supported IOMMU backend policies: {', '.join(IOMMU_BACKEND_POLICIES)}"
        )
    sharing = config.spec.get("sharing")
    if config.kind not in (GPU_CONFIG, MIG_DEVICE_CONFIG) or sharing is None:
        return ""
    strategy = sharing.get("strategy", "")
    gate = {TIME_SLICING: "TimeSlicingSettings", MPS: "MPSSupport"}.get(strategy)
    if not release.verbose_sharing_errors:
        return _validate_terse(sharing, strategy, gate, config.kind, gates)
    if gate is None:
        return (
            f"unknown GPU sharing strategy: {strategy}, "
            f"supported GPU sharing strategies: {TIME_SLICING}, {MPS}"
        )
    if not gates.get(gate):
        return (
            f"{_q(strategy)} is selected as the GPU sharing strategy, "
            f"but the {_q(gate)} feature gate is not enabled"
        )
    if strategy == TIME_SLICING and config.kind == GPU_CONFIG:
        interval = sharing["timeSlicingConfig"]["interval"]
        if interval not in INTERVALS:
            return (
                f"unknown time-slice interval: {interval}, "
                f"supported time-slice intervals: {', '.join(INTERVALS)}"
            )
    percentage = (
        sharing.get("mpsConfig", {}).get("defaultActiveThreadPercentage") if strategy == MPS else None
    )
    if percentage is not None and percentage < 0:
        return "active thread percentage must not be negative"
    if percentage is not None and percentage > 100:
        return "active thread percentage must not be greater than 100"
    return ""


def _validate_terse(
    sharing: Mapping[str, Any], strategy: str, gate: str | None, kind: str, gates: Mapping[str, bool]
) -> str:
    """25.12's `Validate()`: a strategy unknown or gated off is the same terse error."""
    if gate is None or not gates.get(gate):
        return f"unknown GPU sharing strategy: {strategy}"
    if strategy == TIME_SLICING and kind == GPU_CONFIG:
        interval = sharing["timeSlicingConfig"]["interval"]
        return "" if interval in INTERVALS else f"unknown time-slice interval: {interval}"
    percentage = (
        sharing.get("mpsConfig", {}).get("defaultActiveThreadPercentage") if strategy == MPS else None
    )
    if percentage is not None and percentage < 0:
        return "active thread percentage must not be negative"
    if percentage is not None and percentage > 100:
        return "active thread percentage must not be greater than 100"
    return ""


class _ApplyError(Exception):
    pass


def _apply(
    config: DeviceConfig,
    members: Sequence[GpuDevice],
    requests: Sequence[str],
    claim_uid: str,
    gates: Mapping[str, bool],
    consumable_shares: bool,
) -> dict[str, DeviceSettings]:
    if config.kind == VFIO_DEVICE_CONFIG:
        iommu = config.spec.get("iommu")
        return {
            d.name: DeviceSettings(
                "",
                iommu_backend_policy=iommu["backendPolicy"] if iommu else None,
                iommu_api_device=bool(iommu and iommu["enableAPIDevice"]),
            )
            for d in members
        }
    sharing = config.spec.get("sharing")
    if sharing is None:
        return {}
    strategy = sharing["strategy"]
    if strategy == TIME_SLICING:  # validation let it through: TimeSlicingSettings is on
        if config.kind == GPU_CONFIG and "mpsConfig" in sharing:  # MigDeviceSharing has no such check
            raise _ApplyError(
                f"error getting timeslice config for requests '[{' '.join(requests)}]' "
                f"in claim '{claim_uid}': cannot use MpsConfig with the '{TIME_SLICING}' strategy"
            )
        interval = sharing.get("timeSlicingConfig", {}).get("interval")  # MIG devices: none, nothing to set
        return {
            d.name: DeviceSettings(TIME_SLICING, timeslice_interval=interval if d.type == "gpu" else None)
            for d in members
        }
    if consumable_shares:  # main 95932046 device_state.go applySharingConfig, before the DynamicMIG check
        raise _ApplyError("MPS sharing is not supported when consumable shares is enabled")
    if gates.get("DynamicMIG"):
        raise _ApplyError("MPS is not yet supported when using featureGates.DynamicMIG=true")
    if "timeSlicingConfig" in sharing:
        raise _ApplyError(
            f"error getting MPS configuration: cannot use TimeSlicingConfig with the '{MPS}' strategy"
        )
    try:
        return _start_mps(sharing["mpsConfig"], members, claim_uid)
    except _ApplyError as e:
        raise _ApplyError(f"error starting MPS control daemon: {e}") from None


def _start_mps(
    mps: Mapping[str, Any], members: Sequence[GpuDevice], claim_uid: str
) -> dict[str, DeviceSettings]:
    uuids = sorted({d.uuid for d in members})
    daemon_id = f"{claim_uid}-{hashlib.sha256(','.join(uuids).encode()).hexdigest()[:5]}"
    try:
        limits = _pinned_memory_limits(mps, uuids)
    except _ApplyError as e:
        raise _ApplyError(f"error transforming DefaultPerDevicePinnedMemoryLimit into string: {e}") from None
    multi_user = bool(mps.get("multiUser"))
    if multi_user:
        problems: list[str] = []
        for d in members:
            if d.type == "gpu" and _version(d.cuda_compute_capability) < _version(MULTI_USER_MIN_CAPABILITY):
                problems.insert(  # errors.Join(new, err): the newest first
                    0,
                    f"{d.uuid} has insufficient cudaComputeCapability {_q(d.cuda_compute_capability)}, "
                    f"wanted >= {_q(MULTI_USER_MIN_CAPABILITY)}",
                )
        if problems:
            raise _ApplyError("multiuser mode was requested but is not supported: " + "\n".join(problems))
    return {
        d.name: DeviceSettings(
            MPS,
            mps_control_daemon=f"mps-control-daemon-{daemon_id}",
            mps_active_thread_percentage=mps.get("defaultActiveThreadPercentage"),
            mps_pinned_device_memory_limit=limits.get(d.uuid),
            mps_multi_user=multi_user,
        )
        for d in members
    }


def _pinned_memory_limits(mps: Mapping[str, Any], uuids: Sequence[str]) -> dict[str, str]:
    """UUID → "<MiB>M": the default for every device, then the per-device entries (keyed by UUID or index)."""
    limits: dict[str, str] = {}
    default = mps.get("defaultPinnedDeviceMemoryLimit")
    if default is not None and uuids:
        megabytes = _megabytes(default)
        if megabytes <= 0:
            raise _ApplyError(f"invalid limit: default value set too low: {default}")
        limits = dict.fromkeys(uuids, f"{megabytes}M")
    for key, value in (mps.get("defaultPerDevicePinnedMemoryLimit") or {}).items():
        if key in uuids:
            uuid = key
        elif not re.fullmatch(r"[+-]?\d+", key):
            raise _ApplyError(f"invalid device: unable to parse key as an integer: {key}")
        elif 0 <= int(key) < len(uuids):
            uuid = uuids[int(key)]
        else:
            raise _ApplyError(f"invalid device: invalid device index: {int(key)}")
        megabytes = _megabytes(value)
        if megabytes <= 0:
            raise _ApplyError(f"invalid limit: value set too low: {key}: {value}")
        limits[uuid] = f"{megabytes}M"
    return limits


def _megabytes(quantity: Any) -> int:
    value = quantity_bytes(quantity)
    magnitude = abs(value) // (1024 * 1024)  # Go's integer division truncates toward zero
    return magnitude if value >= 0 else -magnitude


def _version(text: str) -> tuple[int, int, int]:
    major, minor, patch = ([int(part) for part in re.findall(r"\d+", text)] + [0, 0, 0])[:3]
    return major, minor, patch


def _q(text: str) -> str:
    """Go's %q for the printable strings that appear here."""
    return json.dumps(text, ensure_ascii=False)
