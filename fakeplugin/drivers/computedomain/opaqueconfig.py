"""Opaque configs of compute-domain.nvidia.com claims, read as NVIDIA's plugin reads them (pure).

`api/nvidia.com/resource/v1beta1/computedomainconfig.go`: `ComputeDomainChannelConfig{domainID,
allocationMode}` and `ComputeDomainDaemonConfig{domainID}`, apiVersion `resource.nvidia.com/v1beta1`;
`cmd/compute-domain-kubelet-plugin/device_state.go` getConfigResultsMap, GetOpaqueDeviceConfigs:

1. `status.allocation.devices.config[]`: class configs, then claim configs; another source is
   `invalid config source: X`, an entry without `opaque` `only opaque parameters are supported by this
   driver`; other drivers' configs are skipped; ours strictly decoded (a permanent error: `error decoding
   config parameters: strict decoding error: unknown field "x"`).
2. Per allocation result of this driver, walking backwards down to the implicit defaults (a daemon
   config, then a channel config, both with an empty domainID): a config naming the result's request wins
   (of the wrong kind for the device: `cannot apply ComputeDomainChannelConfig to request: r`); one
   without requests wins if its kind fits the device type.
3. Per config: a kind the driver does not prepare (GpuConfig, ...) is `runtime object is not a recognized
   configuration`; then Validate: `error validating config: domainID cannot be empty`.

`allocationMode` is not validated by the plugin (only `All` changes anything; the ComputeDomain CRD
restricts the value it writes into the template). Kinds registered in the same scheme (GpuConfig,
MigDeviceConfig, VfioDeviceConfig, ComputeDomain, ComputeDomainClique) are accepted by decoding without
checking their fields [U: upstream strict-decodes them too, so their unknown fields would be reported].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin import scheme
from fakeplugin.apis.computedomain import (
    ALLOCATION_ALL,
    API_VERSION,
    CHANNEL_CONFIG_KIND,
    CLIQUE_KIND,
    COMPUTE_DOMAIN_KIND,
    DAEMON_CONFIG_KIND,
)
from fakeplugin.drivers.computedomain.slices import CHANNEL, DAEMON
from fakeplugin.scheme import GPU_CONFIG, MIG_DEVICE_CONFIG, SCHEME_NAME, VFIO_DEVICE_CONFIG

_MAP = "error generating configResultsMap: "
_FIELDS = {CHANNEL_CONFIG_KIND: ("domainID", "allocationMode"), DAEMON_CONFIG_KIND: ("domainID",)}
_DEVICE_TYPE = {CHANNEL_CONFIG_KIND: CHANNEL, DAEMON_CONFIG_KIND: DAEMON}
_OTHER_KINDS = frozenset(
    {GPU_CONFIG, MIG_DEVICE_CONFIG, VFIO_DEVICE_CONFIG, COMPUTE_DOMAIN_KIND, CLIQUE_KIND}
)


class ComputeDomainConfigError(Exception):
    """The claim's configs cannot be applied; the message is NVIDIA's chain below `prepare devices failed: `.
    `permanent`: NVIDIA would not retry it (a bad config never gets better)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class DomainConfig:
    """One decoded config: its kind and fields (strings as given; "" when absent or null)."""

    kind: str
    domain_id: str = ""
    allocation_mode: str = ""

    @property
    def channels_all(self) -> bool:
        return self.kind == CHANNEL_CONFIG_KIND and self.allocation_mode == ALLOCATION_ALL


@dataclass(frozen=True)
class ConfigGroup:
    """A config and the allocation results (API shape) it applies to: one prepared-device group."""

    config: DomainConfig
    results: tuple[Mapping[str, Any], ...]


def config_groups(
    allocation: Mapping[str, Any], *, driver_name: str, device_types: Mapping[str, str], strict: bool = True
) -> list[ConfigGroup]:
    """The results of ours grouped by their effective config (steps 1 and 2 above), groups in the order of
    their first result. `device_types`: device name → `channel` | `daemon` (what we publish). `strict`:
    unknown fields are errors (Prepare); else dropped (Unprepare reading the checkpointed status)."""
    candidates: list[tuple[tuple[str, ...], DomainConfig]] = [
        ((), DomainConfig(DAEMON_CONFIG_KIND)),
        ((), DomainConfig(CHANNEL_CONFIG_KIND)),
        *_decoded_configs(allocation, driver_name, strict),
    ]
    chosen: dict[int, list[Mapping[str, Any]]] = {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        if not isinstance(result, Mapping) or result.get("driver") != driver_name:
            continue
        device_type = device_types.get(str(result.get("device")))
        if device_type is None:
            raise ComputeDomainConfigError(
                f"{_MAP}requested device is not allocatable: {result.get('device')}"
            )
        request = result.get("request")
        for index in reversed(range(len(candidates))):
            requests, config = candidates[index]
            # Only the two compute-domain kinds are checked against the device type, as upstream.
            mismatch = _DEVICE_TYPE.get(config.kind, device_type) != device_type
            if request in requests:
                if mismatch:
                    raise ComputeDomainConfigError(f"{_MAP}cannot apply {config.kind} to request: {request}")
                chosen.setdefault(index, []).append(result)
                break
            if not requests and not mismatch:
                chosen.setdefault(index, []).append(result)
                break
    return [ConfigGroup(candidates[i][1], tuple(results)) for i, results in chosen.items()]


def check(config: DomainConfig) -> None:
    """Step 3 for one group's config, just before it is applied (upstream: per group, in turn)."""
    if config.kind not in _DEVICE_TYPE:
        raise ComputeDomainConfigError("runtime object is not a recognized configuration")
    if not config.domain_id:
        raise ComputeDomainConfigError("error validating config: domainID cannot be empty")


def _decoded_configs(
    allocation: Mapping[str, Any], driver_name: str, strict: bool
) -> list[tuple[tuple[str, ...], DomainConfig]]:
    where = f"{_MAP}error getting opaque device configs: "
    entries = (allocation.get("devices") or {}).get("config") or []
    by_source: dict[str, list[Mapping[str, Any]]] = {"FromClass": [], "FromClaim": []}
    for entry in entries:
        source = entry.get("source") if isinstance(entry, Mapping) else None
        if source not in by_source:
            raise ComputeDomainConfigError(f"{where}invalid config source: {source or ''}")
        by_source[source].append(entry)
    decoded = []
    for entry in (*by_source["FromClass"], *by_source["FromClaim"]):
        opaque = entry.get("opaque")
        if not isinstance(opaque, Mapping):
            raise ComputeDomainConfigError(f"{where}only opaque parameters are supported by this driver")
        if opaque.get("driver") != driver_name:
            continue  # a request may be satisfiable by several drivers: theirs are not ours to read
        try:
            config = decode(opaque.get("parameters"), strict=strict)
        except scheme.DecodeError as e:
            raise ComputeDomainConfigError(
                f"{where}error decoding config parameters: {e}", permanent=True
            ) from None
        decoded.append((tuple(entry.get("requests") or ()), config))
    return decoded


def decode(parameters: Any, *, strict: bool = True) -> DomainConfig:
    """One config as the Kubernetes JSON serializer of NVIDIA's scheme decodes it (StrictDecoder, or
    NonstrictDecoder: unknown fields dropped); scheme.DecodeError with the serializer's text."""
    group, version, kind = scheme.type_meta(parameters)
    if f"{group}/{version}" != API_VERSION or (kind not in _FIELDS and kind not in _OTHER_KINDS):
        raise scheme.not_registered(group, version, kind, SCHEME_NAME)
    if kind in _OTHER_KINDS:
        return DomainConfig(kind)
    fields = {"apiVersion", "kind", *_FIELDS[kind]}
    values: dict[str, str] = {}
    type_error = ""
    for key, value in parameters.items():
        if key in fields and value is not None and not isinstance(value, str) and not type_error:
            shown = scheme.json_type(value)
            type_error = f"json: cannot unmarshal {shown} into Go struct field {kind}.{key} of type string"
        elif key in fields and isinstance(value, str):
            values[key] = value
    if type_error:
        raise scheme.DecodeError(type_error)
    unknown = [f'unknown field "{k}"' for k in parameters if k not in fields]
    if unknown and strict:
        raise scheme.DecodeError("strict decoding error: " + ", ".join(unknown))
    return DomainConfig(kind, values.get("domainID", ""), values.get("allocationMode", ""))
