"""Prepare and unprepare compute-domain.nvidia.com claims on one node (`device_state.go` Prepare,
Unprepare; `driver.go`; `cleanup.go`).

The skeleton (opened once, batches under the node lock) is runtime.preparer's; the claims come read and
checked by the runtime (runtime.claims: GET, allocated, UID).

Prepare, per claim: its results of ours (caller's thread, outside the lock) ─▶ [node lock,
with every claim queued meanwhile: runtime.groupcommit] PrepareCompleted ⇒ its devices; PrepareAborted
with the same status ⇒ permanent error; overlap with a completed claim ⇒ error; PrepareStarted (one
checkpoint write for the batch) ─▶ configs, domain steps, CDI spec (devices.py) ─▶ PrepareCompleted (one
write). A failure after PrepareStarted leaves the entry so (upstream: "potentially partially prepared").

Unprepare, per claim: unknown or PrepareAborted ⇒ success; else the channel groups' node labels removed
(configs decoded non-strictly from the checkpointed status), the CDI spec removed; PrepareCompleted ⇒
entry dropped, PrepareStarted ⇒ PrepareAborted (abortedAt: now), so a stale retry cannot prepare again.

Failures are retryable (PrepareResult.retryable; the retry within the call is
fakeplugin.drivers.computedomain.retry) but upstream's permanent errors: the claim cannot be read or has no
allocation, a config cannot be decoded, the claim's namespace is not the ComputeDomain's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fakeplugin.apis.computedomain import CHANNEL_CONFIG_KIND, DAEMON_CONFIG_KIND
from fakeplugin.atomicfile import remove_stale_temp_files
from fakeplugin.cdi import SpecFiles, vendor
from fakeplugin.drivers.computedomain import cdispec
from fakeplugin.drivers.computedomain import checkpoint as cp
from fakeplugin.drivers.computedomain.cleanup import aborted_at, expired, stale_claims
from fakeplugin.drivers.computedomain.devices import prepare_groups
from fakeplugin.drivers.computedomain.domains import DomainError, DomainManager
from fakeplugin.drivers.computedomain.emulateddaemon import EmulatedDaemons
from fakeplugin.drivers.computedomain.opaqueconfig import ComputeDomainConfigError, config_groups
from fakeplugin.drivers.computedomain.slices import CHANNEL, DAEMON, device_name
from fakeplugin.model import ClaimRef, ClaimState, PreparedDevice, PrepareResult
from fakeplugin.runtime.allocation import ClaimError, allocated_devices
from fakeplugin.runtime.driver import Claim, GetClaim
from fakeplugin.runtime.preparer import NodePreparer

log = logging.getLogger(__name__)

DEVICE_TYPES = {device_name(CHANNEL): CHANNEL, device_name(DAEMON): DAEMON}


@dataclass(frozen=True)
class ComputeDomainRequest:
    ref: ClaimRef
    status: dict[str, Any]  # the claim's status, as checkpointed
    devices: frozenset[str]  # ours, not admin-access: what the overlap check compares


class PrepareFailure(Exception):
    """A claim's failure after PrepareStarted, its text upstream's."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


def prepare_error(ref: ClaimRef, message: str) -> str:
    return f"error preparing devices for claim '{ref}': {message}"


def unprepare_error(ref: ClaimRef, message: str) -> str:
    return f"error unpreparing devices for claim '{ref}': {message}"


class ComputeDomainPreparer(NodePreparer[ComputeDomainRequest]):
    """The node's prepare side (runtime.preparer.NodePreparer). `plugin_start`: the plugin's own start work
    before the prepare side's (fabric.py, cliquelabel.py), run by `open`; `get_claim`: the cleanup's read
    of stale claims."""

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        get_claim: GetClaim,
        domains: DomainManager,
        cdi_root: Path,
        plugin_dir: Path,
        boot_id: str,
        plugin_start: Callable[[], None],
        daemons: EmulatedDaemons | None = None,
        lock_timeout: float = 10.0,
        now: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(plugin_dir, lock_timeout=lock_timeout)
        self._driver, self._node, self._get_claim = driver_name, node_name, get_claim
        self._domains, self._plugin_dir, self._cdi_root = domains, plugin_dir, cdi_root
        self._boot_id, self._now, self._plugin_start = boot_id, now, plugin_start
        self._daemons = daemons  # serve --emulate-daemon
        self._checkpoint = cp.ComputeDomainCheckpointFile(plugin_dir / cp.FILE_NAME)
        self._specs = SpecFiles(cdi_root, driver_name)

    def _startup(self) -> None:
        """The plugin's start, then NewDeviceState: base CDI spec, checkpoint of this boot; then the
        checkpoint cleanup, once."""
        self._plugin_start()
        self._cdi_root.mkdir(parents=True, exist_ok=True)
        self._plugin_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            remove_stale_temp_files(self._plugin_dir)  # no writer is midway: we hold the lock
            remove_stale_temp_files(self._cdi_root, target_prefix=vendor(self._driver))
            cdispec.write_base_spec(self._cdi_root, self._driver)
            self._checkpoint.save(
                self._this_boot()
            )  # ComputeDomainCheckpointError: fatal at start, as upstream
        self._cleanup()

    def _this_boot(self) -> cp.ComputeDomainCheckpoint:
        if not self._checkpoint.exists():
            log.info("Create empty checkpoint")
            return cp.ComputeDomainCheckpoint(self._boot_id)
        log.info("Found previous checkpoint: %s", cp.FILE_NAME)
        checkpoint = self._checkpoint.load()
        if checkpoint.boot_id in ("", self._boot_id):
            return replace(checkpoint, boot_id=self._boot_id)  # "" (older plugin): injected
        log.info(
            "Invalidating checkpoint: checkpoint nodeBootID %r != current %r",
            checkpoint.boot_id,
            self._boot_id,
        )
        return cp.ComputeDomainCheckpoint(self._boot_id)

    def _cleanup(self) -> None:
        """CheckpointCleanupManager.cleanup: unprepare stale PrepareStarted claims, drop expired
        PrepareAborted entries."""
        for ref in stale_claims(self._checkpoint.load(), self._get_claim):
            if error := self._unprepares.submit([ref])[ref.uid]:  # not unprepare(): open() is running
                log.warning(
                    "Checkpointed RC cleanup: error during unprepare for %s (retried later): %s", ref, error
                )
            else:
                log.info("Checkpointed RC cleanup: unprepared stale claim: %s", ref)
        with self._lock:
            checkpoint = self._checkpoint.load()
            old = [uid for uid, entry in checkpoint.claims.items() if expired(entry, self._now())]
            for uid in old:
                checkpoint = checkpoint.without_claim(uid)
            if old:
                self._checkpoint.save(checkpoint)

    def _checkpoint_claims(self) -> Mapping[str, cp.Entry]:
        return self._checkpoint.load().claims

    # -- prepare ---------------------------------------------------------------------------------------------

    def _request(self, claim: Claim) -> ComputeDomainRequest | PrepareResult:
        ref = claim.ref
        try:
            ours = allocated_devices(claim.obj, ref, driver_name=self._driver, pool_name=self._node)
        except ClaimError as e:
            return PrepareResult(error=_logged(ref, str(e)))
        if not ours:
            return PrepareResult()  # nothing of ours on this node
        own = frozenset(d for d, a in ours.items() if not a.admin_access)
        return ComputeDomainRequest(ref, claim.obj["status"], own)

    def _prepare_unlocked(self, ref: ClaimRef, message: str) -> PrepareResult:
        return PrepareResult(error=_logged(ref, message), retryable=True)

    def _prepare_locked(self, requests: list[ComputeDomainRequest]) -> dict[str, PrepareResult]:
        results: dict[str, PrepareResult] = {}
        try:
            checkpoint = self._checkpoint.load()
        except cp.ComputeDomainCheckpointError as e:
            return {r.ref.uid: _failed(r.ref, f"unable to get checkpoint: {e}") for r in requests}
        started: list[ComputeDomainRequest] = []
        for r in requests:
            entry = checkpoint.claims.get(r.ref.uid)
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                results[r.ref.uid] = PrepareResult(devices=_kubelet_devices(entry))
                continue
            if entry is not None and entry.state is ClaimState.PREPARE_ABORTED and entry.status == r.status:
                message = f"stale prepare for claim {r.ref}: claim prepare was already aborted"
                results[r.ref.uid] = _failed(r.ref, message)
                continue
            if holder := _overlap(r, checkpoint, started, self._driver):
                results[r.ref.uid] = _failed(r.ref, f"unable to prepare claim {r.ref.uid}: {holder}")
                continue
            entry = cp.Entry(ClaimState.PREPARE_STARTED, r.status, name=r.ref.name, namespace=r.ref.namespace)
            checkpoint = checkpoint.with_claim(r.ref.uid, entry)
            started.append(r)
        if started and (failure := self._save(checkpoint)):
            return results | {r.ref.uid: _failed(r.ref, failure) for r in started}
        completed = []
        for r in started:
            try:
                entry = self._prepare_devices(r, checkpoint)
            except PrepareFailure as e:
                results[r.ref.uid] = PrepareResult(error=_logged(r.ref, str(e)), retryable=e.retryable)
                continue
            checkpoint = checkpoint.with_claim(r.ref.uid, entry)
            completed.append(r)
        failure = self._save(checkpoint) if completed else ""
        for r in completed:
            entry = checkpoint.claims[r.ref.uid]
            results[r.ref.uid] = (
                _failed(r.ref, failure) if failure else PrepareResult(devices=_kubelet_devices(entry))
            )
            if not failure:
                log.info("Prepared devices for claim '%s'", r.ref)
        return results

    def _prepare_devices(self, r: ComputeDomainRequest, checkpoint: cp.ComputeDomainCheckpoint) -> cp.Entry:
        """The claim's devices, spec written; its PrepareCompleted entry. PrepareFailure: the claim's."""
        try:
            allocation = r.status["allocation"]
            groups = config_groups(allocation, driver_name=self._driver, device_types=DEVICE_TYPES)
            prepared = prepare_groups(
                r.ref,
                groups,
                checkpoint,
                domains=self._domains,
                plugin_dir=self._plugin_dir,
                driver_name=self._driver,
            )
            for group in groups if self._daemons else ():
                if group.config.kind == DAEMON_CONFIG_KIND:
                    self._daemons.started(group.config.domain_id, r.status.get("reservedFor") or [])
        except (ComputeDomainConfigError, DomainError) as e:
            message = prepare_error(r.ref, f"prepare devices failed: {e}")
            raise PrepareFailure(message, retryable=not e.permanent) from e
        if prepared.spec_devices:
            try:
                spec = cdispec.claim_spec(r.ref.uid, prepared.spec_devices, driver_name=self._driver)
                self._specs.write_claim(r.ref.uid, spec)
            except (OSError, ValueError) as e:
                raise PrepareFailure(
                    prepare_error(r.ref, f"unable to create CDI spec file for claim: {e}")
                ) from e
        return cp.Entry(ClaimState.PREPARE_COMPLETED, r.status, prepared.groups, r.ref.name, r.ref.namespace)

    # -- unprepare -------------------------------------------------------------------------------------------

    def _unprepare_unlocked(self, ref: ClaimRef, message: str) -> str:
        return _logged(ref, message, unprepare_error)

    def _unprepare_locked(self, refs: list[ClaimRef]) -> dict[str, str]:
        results: dict[str, str] = {}
        try:
            checkpoint = self._checkpoint.load()
        except cp.ComputeDomainCheckpointError as e:
            return {ref.uid: _logged(ref, f"unable to get checkpoint: {e}", unprepare_error) for ref in refs}
        before = checkpoint
        for ref in refs:
            entry = checkpoint.claims.get(ref.uid)
            if entry is None or entry.state is ClaimState.PREPARE_ABORTED:
                log.debug("Unprepare noop: claim %s is not prepared (%s)", ref, entry and entry.state)
                results[ref.uid] = ""
                continue
            try:
                self._unprepare_devices(entry)
                self._specs.remove_claim(ref.uid)
            except (ComputeDomainConfigError, DomainError) as e:
                results[ref.uid] = _logged(ref, f"unprepare devices failed: {e}", unprepare_error)
                continue
            except OSError as e:
                results[ref.uid] = _logged(
                    ref, f"unable to delete CDI spec file for claim: {e}", unprepare_error
                )
                continue
            if entry.state is ClaimState.PREPARE_COMPLETED:
                checkpoint = checkpoint.without_claim(ref.uid)
            else:  # PrepareStarted: kept, so that a stale retry of this claim version cannot prepare it again
                aborted = aborted_at(self._now())
                aborted_entry = cp.Entry(
                    ClaimState.PREPARE_ABORTED, entry.status, (), ref.name, ref.namespace, aborted
                )
                checkpoint = checkpoint.with_claim(ref.uid, aborted_entry)
            results[ref.uid] = ""
            log.info("Unprepared devices for claim '%s'", ref)
        if checkpoint is not before and (failure := self._save(checkpoint)):
            for ref in refs:
                results[ref.uid] = results[ref.uid] or _logged(ref, failure, unprepare_error)
        return results

    def _unprepare_devices(self, entry: cp.Entry) -> None:
        allocation = entry.status.get("allocation") or {}
        for group in config_groups(
            allocation, driver_name=self._driver, device_types=DEVICE_TYPES, strict=False
        ):
            if group.config.kind == CHANNEL_CONFIG_KIND and group.config.domain_id:
                self._domains.remove_node_label(group.config.domain_id)
            elif group.config.kind == DAEMON_CONFIG_KIND and self._daemons and group.config.domain_id:
                self._daemons.stopped(group.config.domain_id)

    def _save(self, checkpoint: cp.ComputeDomainCheckpoint) -> str:
        try:
            self._checkpoint.save(checkpoint)
        except OSError as e:
            return f"unable to update checkpoint: {e}"
        return ""


def _overlap(
    r: ComputeDomainRequest,
    checkpoint: cp.ComputeDomainCheckpoint,
    started: Sequence[ComputeDomainRequest],
    driver_name: str,
) -> str:
    """validateNoOverlappingPreparedDevices, with the claims this batch started before `r` counted as the
    completed claims they would be one claim at a time."""
    holders = [(u, e.status) for u, e in checkpoint.claims.items() if e.state is ClaimState.PREPARE_COMPLETED]
    holders += [(s.ref.uid, s.status) for s in started]
    for uid, status in holders:
        if uid == r.ref.uid:
            continue
        for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
            device = result.get("device")
            if result.get("driver") == driver_name and device in r.devices and not result.get("adminAccess"):
                return f"requested device {device} is already allocated to different claim {uid}"
    return ""


def _kubelet_devices(entry: cp.Entry) -> tuple[PreparedDevice, ...]:
    return tuple(
        PreparedDevice(
            pool_name=d["PoolName"],
            device_name=d["DeviceName"],
            request_names=tuple(d["Requests"]),
            cdi_device_ids=tuple(d["CDIDeviceIDs"]),
        )
        for d in entry.kubelet_devices()
    )


def _failed(ref: ClaimRef, message: str) -> PrepareResult:
    return PrepareResult(error=_logged(ref, prepare_error(ref, message)), retryable=True)


def _logged(ref: ClaimRef, message: str, wrap: Callable[[ClaimRef, str], str] | None = None) -> str:
    text = wrap(ref, message) if wrap else message
    log.error("claim %s: %s", ref, text)
    return text
