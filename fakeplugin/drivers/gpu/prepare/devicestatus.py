"""`--device-status` (serve and fleet, GPU plugin; ours, beyond NVIDIA's releases): a prepared claim's GPU
and MIG devices reported in its `status.devices[]` (KEP-4817; docs/compute-domains.md, *Claim device
status*).

After a claim's Prepare succeeded, each allocation result of ours on this node (driver, pool = node,
device, and its shareID with consumable shares) gets an entry with the condition `Ready` True (reason
`DevicePrepared`) and `data`: the device as the container sees it, under the names of its ResourceSlice
attributes (`type`, `uuid`, `productName`, `pciBusID`; a MIG device also `parentUUID` and `profile`; a
DynamicMIG partition the UUID it got when Prepare created it, which its slice does not carry). After a
successful Unprepare our entries of this node are removed; other drivers' entries and other conditions of
ours stay (runtime.claimstatus). The write never fails the claim: a refused or failed write is logged
(with 409 tried again on a fresh read, CONFLICT_ATTEMPTS times in all).

Who may write (kubernetes/kubernetes v1.37.2): `update` of `resourceclaims/status`; from 1.36, with the
gate DRAResourceClaimGranularStatusAuthorization (beta, on), also the verb `associated-node:update` (a
service account token bound to a pod on the claim's allocated node) or `arbitrary-node:update` on the
synthetic subresource `resourceclaims/driver`, named by the driver (`pkg/registry/resource/resourceclaim/
strategy.go` resourceclaimStatusStrategy.ValidateUpdate; `pkg/registry/resource/utils.go`
AuthorizedForDeviceStatus; `pkg/features/kube_features.go`). The chart grants both for its own pods
(charts/fakeplugin, `kubeletPlugin.deviceStatus`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from fakeplugin.kube import describe_api_error
from fakeplugin.mig import created_for_claim
from fakeplugin.model import ClaimRef, GpuDevice
from fakeplugin.runtime import claimstatus
from fakeplugin.runtime.driver import GetClaim

log = logging.getLogger(__name__)

Obj = dict[str, Any]
READY = "Ready"  # the condition KEP-4817 names: "If the device has been configured ..., Ready should be True"
REASON = "DevicePrepared"
CONFLICT_ATTEMPTS = 3


def device_data(device: GpuDevice) -> dict[str, str]:
    """What `data` says of a prepared device (its slice attributes' names)."""
    data = {
        "type": device.type,
        "uuid": device.uuid,
        "productName": device.product_name,
        "pciBusID": device.pci_bus_id,
    }
    if device.mig is not None:
        data |= {"parentUUID": device.parent_uuid or "", "profile": device.mig.profile}
    return data


def prepared_devices(
    claim: Obj, prepared: Collection[str], pool: Mapping[str, GpuDevice], *, driver: str, node: str, now: str
) -> list[Obj] | None:
    """The claim's new status.devices once the devices named `prepared` (of pool `node`) are prepared:
    an entry per allocation result of ours naming one; None when it is already so."""
    uid = claim["metadata"]["uid"]
    results = ((claim["status"]["allocation"].get("devices") or {}).get("results")) or []
    wanted: dict[claimstatus.Key, Obj] = {}
    for result in results:
        name = result.get("device", "")
        if result.get("driver") != driver or result.get("pool") != node or name not in prepared:
            continue
        if (device := pool.get(name)) is None:  # gone from the inventory since: nothing to say of it
            continue
        ready = {"type": READY, "status": "True", "reason": REASON, "message": f"prepared on node {node}"}
        wanted[claimstatus.key(result)] = {
            "conditions": [ready],
            "data": device_data(created_for_claim(device, uid)),
        }
    return claimstatus.status_devices(claim, wanted, now) if wanted else None


def unprepared_devices(claim: Obj, *, driver: str, node: str) -> list[Obj] | None:
    """The claim's new status.devices without our entries of pool `node`; None when it has none."""
    return claimstatus.status_devices(claim, {}, "", drop=lambda k: k[:2] == (driver, node))


class StatusWriter:
    """Writes the status.devices of claims prepared and unprepared on one node (`node`, the pool)."""

    def __init__(
        self,
        *,
        driver: str,
        node: str,
        get_claim: GetClaim,
        replace: Callable[[str, Obj], Obj],
        log_level: int = logging.INFO,
    ) -> None:
        self._driver, self._node = driver, node
        self._get_claim, self._replace = get_claim, replace
        self._log_level = log_level

    def prepared(
        self, ref: ClaimRef, claim: Obj, names: Collection[str], pool: Mapping[str, GpuDevice]
    ) -> None:
        """`claim` as the runtime read it for Prepare (re-read after a conflict)."""

        def new(c: Obj, now: str) -> list[Obj] | None:
            return prepared_devices(c, names, pool, driver=self._driver, node=self._node, now=now)

        self._write(ref, claim, new)

    def unprepared(self, ref: ClaimRef) -> None:
        self._write(ref, None, lambda c, _: unprepared_devices(c, driver=self._driver, node=self._node))

    def _write(self, ref: ClaimRef, claim: Obj | None, new: Callable[[Obj, str], list[Obj] | None]) -> None:
        for _ in range(CONFLICT_ATTEMPTS):
            try:
                if claim is None:
                    claim = self._get_claim(ref.namespace, ref.name)
                allocated = (claim.get("status") or {}).get("allocation")
                if claim["metadata"].get("uid") != ref.uid or not allocated:
                    return  # replaced or deallocated: the API server dropped its entries
                devices = new(claim, datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                if devices is None:
                    return
                claimstatus.put_devices(self._replace, claim, devices)
                log.log(self._log_level, "claim %s: status.devices written (%d entries)", ref, len(devices))
                return
            except Exception as exc:  # whatever the API client raises: a report, never the claim's failure
                status = getattr(exc, "status", None)
                if status == 404:
                    return  # deleted: nothing to report on
                if status != 409:
                    log.warning("claim %s: status.devices not written: %s", ref, describe_api_error(exc))
                    return
                claim = None  # another writer was first: read it again
        log.warning("claim %s: status.devices not written: %d conflicts in a row", ref, CONFLICT_ATTEMPTS)
