"""What of a claim is ours to prepare (pure): its allocation results for our pool.

A malformed result fails its claim (`ClaimError`) with a text naming the claim and the field at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin.cdi import cdi_device_id
from fakeplugin.model import ClaimRef, PreparedDevice


class ClaimError(Exception):
    """Fails one claim; the message is what the kubelet reports for it."""


@dataclass(frozen=True)
class AllocatedDevice:
    """One device of ours in a claim's allocation: its base request names, in order, and its access."""

    requests: tuple[str, ...]
    # Every result of ours naming the device has `adminAccess: true` (KEP DRAAdminAccess): the real driver
    # leaves such a device out of its overlap check on both sides (SIGS v25.12.0, v0.4.1:
    # cmd/gpu-kubelet-plugin/device_state.go requestedNonAdminDevices, prepared.go GetNonAdminDevices).
    admin_access: bool = False


def allocated_devices(
    claim: Mapping[str, Any], ref: ClaimRef, *, driver_name: str, pool_name: str
) -> dict[str, AllocatedDevice]:
    """Device name → base request names and access of the allocation results that are ours (driver, pool).

    `claim`: allocated, its UID the reference's (the runtime checked: runtime.claims). ClaimError names a
    malformed result.
    """
    claim_name = f"claim {ref.namespace}/{ref.name}"
    results = (claim["status"]["allocation"].get("devices") or {}).get("results") or []
    devices: dict[str, list[str]] = {}
    non_admin: set[str] = set()
    for i, result in enumerate(results):
        path = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise ClaimError(f"{claim_name}: {path}: expected an object, got {result!r}")
        if result.get("driver") != driver_name or result.get("pool") != pool_name:
            continue
        for key in ("device", "request"):
            if not isinstance(result.get(key), str) or not result[key]:
                raise ClaimError(f"{claim_name}: {path}.{key}: expected a non-empty string")
        admin = result.get("adminAccess", False)
        if admin is not None and not isinstance(admin, bool):
            raise ClaimError(f"{claim_name}: {path}.adminAccess: expected a boolean, got {admin!r}")
        if not admin:
            non_admin.add(result["device"])
        requests = devices.setdefault(result["device"], [])
        base_request = result["request"].split("/", 1)[0]  # "req/sub" → "req" (resourceclaim.BaseRequestRef)
        if base_request not in requests:
            requests.append(base_request)
    return {
        device: AllocatedDevice(tuple(requests), device not in non_admin)
        for device, requests in devices.items()
    }


def prepared_devices(
    ref: ClaimRef, wanted: Mapping[str, AllocatedDevice], *, pool_name: str, driver_name: str
) -> tuple[PreparedDevice, ...]:
    """What the kubelet gets for the claim's devices (`allocated_devices`): one CDI device ID each."""
    return tuple(
        PreparedDevice(
            pool_name=pool_name,
            device_name=name,
            request_names=allocated.requests,
            cdi_device_ids=(cdi_device_id(ref.uid, name, driver_name=driver_name),),
        )
        for name, allocated in wanted.items()
    )
