"""What of a claim is ours to prepare (pure): its reference checked, its allocation results for our pool.

Texts follow the upstream kubeletplugin helper and the real driver, so pod events read the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakeplugin.k8snames import DNS_LABEL, DNS_SUBDOMAIN, MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN
from fakeplugin.model import ClaimRef, PreparedDevice
from fakeplugin.prepare.cdi import cdi_device_id

# Claim UIDs name files (CDI specs) and CDI devices, so they must be DNS labels: every Kubernetes UID (a
# lowercase UUID) is one, and nothing that could leave a directory ('/', '.') or break a CDI device name is.


class ClaimError(Exception):
    """Fails one claim; the message is what the kubelet reports for it."""


def validate_claim_ref(ref: ClaimRef) -> None:
    """Reject references whose parts could not have come from the API server (before any path or API call)."""
    rules = (
        ("uid", ref.uid, DNS_LABEL, MAX_DNS_LABEL, "lowercase letters, digits and '-'"),
        ("namespace", ref.namespace, DNS_LABEL, MAX_DNS_LABEL, "a DNS label"),
        ("name", ref.name, DNS_SUBDOMAIN, MAX_DNS_SUBDOMAIN, "a DNS subdomain"),
    )
    for field, value, pattern, max_len, what in rules:
        if len(value) > max_len or not pattern.fullmatch(value):
            raise ClaimError(
                f"invalid claim reference {str(ref)!r}: {field} {value!r} must be {what}, "
                f"at most {max_len} characters, starting and ending with a letter or digit"
            )


def allocated_devices(
    claim: Mapping[str, Any], ref: ClaimRef, *, driver_name: str, pool_name: str
) -> dict[str, tuple[str, ...]]:
    """Device name → base request names of the allocation results that are ours (driver and pool), in order.

    Raises ClaimError with the upstream library's texts for an unallocated or replaced claim.
    """
    claim_name = f"claim {ref.namespace}/{ref.name}"
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    if not allocation:
        raise ClaimError(f"{claim_name} not allocated")
    metadata = claim.get("metadata") or {}
    if not isinstance(metadata, Mapping) or metadata.get("uid") != ref.uid:
        raise ClaimError(f"{claim_name} got replaced")
    results = (allocation.get("devices") or {}).get("results") or []
    devices: dict[str, list[str]] = {}
    for i, result in enumerate(results):
        path = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise ClaimError(f"{claim_name}: {path}: expected an object, got {result!r}")
        if result.get("driver") != driver_name or result.get("pool") != pool_name:
            continue
        for key in ("device", "request"):
            if not isinstance(result.get(key), str) or not result[key]:
                raise ClaimError(f"{claim_name}: {path}.{key}: expected a non-empty string")
        requests = devices.setdefault(result["device"], [])
        base_request = result["request"].split("/", 1)[0]  # "req/sub" → "req" (resourceclaim.BaseRequestRef)
        if base_request not in requests:
            requests.append(base_request)
    return {device: tuple(requests) for device, requests in devices.items()}


def prepared_devices(
    ref: ClaimRef, wanted: Mapping[str, tuple[str, ...]], *, pool_name: str, driver_name: str
) -> tuple[PreparedDevice, ...]:
    """What the kubelet gets for the claim's devices (`allocated_devices`): one CDI device ID each."""
    return tuple(
        PreparedDevice(
            pool_name=pool_name,
            device_name=name,
            request_names=requests,
            cdi_device_ids=(cdi_device_id(ref.uid, name, driver_name=driver_name),),
        )
        for name, requests in wanted.items()
    )
