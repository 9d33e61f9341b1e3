"""A ResourceClaim's `status.devices[]` as a driver writes it (KEP-4817, gate DRAResourceClaimDeviceStatus):
our entries merged into what others wrote, and the update that writes them. Pure but for `put_devices`.

Users: the ComputeDomain controller's binding conditions (computedomain.controller.binding) and the GPU
plugin's `--device-status` (prepare.devicestatus).

The API server's rules (kubernetes/kubernetes v1.37.2): an entry is keyed by driver, pool, device and
shareID, unique in the list, and must name a device of the claim's allocation (`pkg/apis/resource/
validation/validation.go` validateResourceClaimStatusUpdate, validateDeviceStatus); at most 8 conditions
(`pkg/apis/resource/types.go` AllocatedDeviceStatusMaxConditions), each a valid metav1.Condition
(lastTransitionTime and reason required); `data` a JSON object of at most 10 KiB
(AllocatedDeviceStatusDataMaxLength). Deallocation drops the entries of deallocated devices
(`pkg/registry/resource/resourceclaim/strategy.go` dropDeallocatedStatusDevices).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

Obj = dict[str, Any]
# (driver, pool, device, shareID): an entry's identity ("" without a shareID, as the API server's
# SharedDeviceID).
Key = tuple[str, str, str, str]
API_VERSION = "resource.k8s.io/v1"


def key(entry: Mapping[str, Any]) -> Key:
    """The identity of a status.devices entry or an allocation result."""
    return (
        str(entry.get("driver", "")),
        str(entry.get("pool", "")),
        str(entry.get("device", "")),
        str(entry.get("shareID") or ""),
    )


def _same(a: Obj, b: Obj) -> bool:
    return all(a.get(k) == b.get(k) for k in ("status", "reason", "message"))


def merged_conditions(existing: list[Obj], wanted: list[Obj], now: str) -> list[Obj]:
    """`existing` with the types of `wanted` replaced by it; an unchanged condition is kept as it is, a
    changed one keeps its lastTransitionTime unless its status changed (metav1.Condition's rule)."""
    by_type = {c.get("type"): c for c in existing}
    owned = {w["type"] for w in wanted}
    out = [c for c in existing if c.get("type") not in owned]
    for want in wanted:
        old = by_type.get(want["type"])
        if old is not None and _same(old, want):
            out.append(old)
            continue
        moved = old is None or old.get("status") != want["status"]
        out.append({**want, "lastTransitionTime": now if moved else old.get("lastTransitionTime", now)})
    return out


def status_devices(
    claim: Obj,
    wanted: Mapping[Key, Obj],
    now: str,
    *,
    drop: Callable[[Key], bool] = lambda _: False,
) -> list[Obj] | None:
    """The claim's new `status.devices`: for each key of `wanted`, its entry with the wanted `conditions`
    merged in (merged_conditions: without timestamps, others' condition types stay) and every other wanted
    field (`data`) set; entries whose key `drop` accepts, and that are not wanted, removed; every other
    entry kept as it is. None when nothing changes (idempotent: an unchanged condition is never rewritten)."""
    existing = (claim.get("status") or {}).get("devices") or []
    out: list[Obj] = []
    done: set[Key] = set()
    for entry in existing:
        k = key(entry)
        if k in wanted and k not in done:
            entry = _merged(entry, wanted[k], now)
            done.add(k)
        elif drop(k):
            continue
        out.append(entry)
    for k, fields in wanted.items():
        if k not in done:
            driver, pool, device, share = k
            entry = {"driver": driver, "pool": pool, "device": device} | ({"shareID": share} if share else {})
            out.append(_merged(entry, fields, now))
    return None if out == existing else out


def _merged(entry: Obj, fields: Obj, now: str) -> Obj:
    conditions = merged_conditions(entry.get("conditions") or [], fields.get("conditions") or [], now)
    return {**entry, **fields, "conditions": conditions}


def put_devices(replace: Callable[[str, Obj], Obj], claim: Obj, devices: list[Obj]) -> Obj:
    """Write `devices` as the claim's status.devices: an update of its status as read (`replace`: a PUT),
    its resourceVersion a precondition (409 when another writer was first). Not a patch: the API server
    re-encodes the object for one, the allocation's opaque parameters (raw JSON, kept as sent) then differ
    in their bytes, and 1.37 refuses that as `status.allocation: ... field cannot be modified once set`
    (kubernetes v1.37.2 pkg/apis/resource/v1/zz_generated.validations.go: ResourceClaimStatus.Allocation
    NoModify). A PUT sends them back as they were read, compact (fakeplugin.kube.encode): the bytes stored
    when they were written compact, as kubectl, every Go client and our own writes do; parameters another
    client stored in another form (with spaces, say) are refused as above. Returns the claim as written."""
    meta = claim["metadata"]
    path = (
        f"/apis/{API_VERSION}/namespaces/{quote(meta['namespace'], safe='')}"
        f"/resourceclaims/{quote(meta['name'], safe='')}/status"
    )
    status = {k: v for k, v in claim["status"].items() if k != "devices"}
    body = {**claim, "apiVersion": API_VERSION, "status": status | ({"devices": devices} if devices else {})}
    return replace(path, body)
