"""Prepare and unprepare gpu.nvidia.com claims on this node: the checkpoint state machine, files.

The skeleton (opened once, batches under the node lock) is runtime.preparer's; the claims come read and
checked by the runtime (runtime.claims: GET, allocated, UID).

Prepare, per claim (one claim's failure never touches the others; its message goes into its result):

    our allocated devices ─▶ injected faults (faults.claimfaults: delay, error, fail count)
                             (prepare.resolve: in the caller's thread, outside the lock)
    ─▶ [node lock, with every claim queued meanwhile: runtime.groupcommit] read checkpoint
      ├▶ PrepareCompleted: return its devices (CDI spec and nvidia-smi data written again if they vanished)
      └▶ PrepareStarted (an attempt died midway): roll back, then as for a new claim:
    ─▶ overlap check ─▶ write PrepareStarted (all claims of the batch at once) ─▶ opaque configs
    (prepare.opaqueconfig: typed settings) ─▶ nvidia-smi data (+ NVML descriptions, with the library) + CDI
    spec on disk ─▶ write PrepareCompleted (the batch's claims that got that far, at once)

Unprepare, per claim: its unprepare-error annotation (outside the lock; a GET only where it can apply,
faults.claimfaults; not found or unreachable ⇒ no fault: Unprepare never waits for the API server to
work) ─▶ [node lock, batched likewise]
unknown ⇒ success; otherwise remove the CDI spec and the claim's nvidia-smi data (and NVML descriptions),
drop the entry; one checkpoint write per batch.

Invariants: a CDI spec exists only for a claim the checkpoint holds (at least PrepareStarted), and
PrepareCompleted is written only once the spec is on disk; the data files a spec mounts (nvidia-smi's,
NVML's) are written before it and removed after it, by the checkpoint entry's devices, so a rollback or an
Unprepare finds them all. Prepare is idempotent: a completed claim is answered from the checkpoint with the
same devices and CDI IDs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from fakeplugin import consumableshares, featuregates, releases
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare import smi, stale
from fakeplugin.drivers.gpu.prepare.claimfiles import ClaimFiles, prepare_error, unprepare_error
from fakeplugin.drivers.gpu.prepare.overlap import conflict
from fakeplugin.drivers.gpu.prepare.resolve import GpuRequest, Resolver, pool_reader
from fakeplugin.faults import claimfaults
from fakeplugin.model import ClaimRef, ClaimState, GpuDevice, PrepareResult
from fakeplugin.releases import DriverRelease
from fakeplugin.runtime.allocation import ClaimError
from fakeplugin.runtime.driver import Claim, GetClaim
from fakeplugin.runtime.preparer import NodePreparer

log = logging.getLogger(__name__)


class GpuPreparer(NodePreparer[GpuRequest]):
    """Prepares and unprepares claims for `driver_name` on `node_name` (runtime.preparer.NodePreparer).

    `devices` (device name → GpuDevice of this node's pool) may be live (prepare.resolve.LiveDevices, such
    as publish.node.NodeDevices): each claim reads one snapshot of it.
    `get_claim`: Unprepare's read of a claim's unprepare-error (faults.claimfaults).
    `device_nodes` adds fake /dev/nvidia* character devices to the CDI specs (prepare.cdispec).
    `nvml_library` (the built mock NVML library, fakeplugin.nvml.build): installed under `plugin_dir` at
    start, where the node's runtime finds it (prepare.nvmldata.installed_library), the CDI specs mount that
    copy, and each device's NVML description written beside the nvidia-smi data; None: no NVML.
    `removed()`: devices of `devices` the plugin no longer holds (PassthroughSupport, publish.siblings):
    a claim allocated one fails as upstream's does.
    `read_unprepare_faults()`: the node asks for every Unprepare to read its claim's unprepare-error
    (faults.claimfaults; else only claims that had one at their Prepare are read).
    `feature_gates` (the real driver's, fakeplugin.featuregates) and `release` (fakeplugin.releases; default
    the default release) rule what claims' opaque configs may do. `consumable_shares` (the mode, fakeplugin.
    consumableshares.parse): any but `disabled` lets claims share a device when their configs for it agree.
    `open()` creates `cdi_root` and `plugin_dir` if needed and loads the checkpoint once, as the real
    driver does at start: a checkpoint from another boot is replaced by an empty one, a corrupt one raises
    `checkpoint.CheckpointError`; a held lock raises `LockTimeoutError`. The CDI specs of prepared claims
    that an earlier fakeplugin version wrote are brought to the current shape then
    (`ClaimFiles.upgrade_specs`).
    """

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        devices: Mapping[str, GpuDevice],
        get_claim: GetClaim,
        cdi_root: Path,
        plugin_dir: Path,
        boot_id: str,
        sync_checkpoint: bool = True,
        lock_timeout: float = 10.0,
        device_nodes: bool = False,
        feature_gates: Mapping[str, bool] = MappingProxyType(featuregates.KNOWN),
        release: DriverRelease | None = None,
        consumable_shares: str = consumableshares.DISABLED,
        sleep: Callable[[float], None] = time.sleep,
        read_unprepare_faults: Callable[[], bool] = claimfaults.never,
        nvml_library: Path | None = None,
        removed: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        super().__init__(plugin_dir, lock_timeout=lock_timeout)
        self._driver_name, self._cdi_root, self._plugin_dir = driver_name, cdi_root, plugin_dir
        self._faults = claimfaults.Injector(get_claim, sleep, read_unprepare_faults)
        self._claims = Resolver(
            driver_name=driver_name,
            node_name=node_name,
            pool=pool_reader(devices),  # may be live (the inventory): one snapshot per claim
            faults=self._faults,
            feature_gates=dict(feature_gates),
            release=release or releases.get(None),
            shared=consumable_shares != consumableshares.DISABLED,
            removed=removed,
        )
        self._checkpoint = cp.CheckpointFile(
            plugin_dir / cp.FILE_NAME,
            boot_id=boot_id,
            sync=sync_checkpoint,
            release=release or releases.get(None),
        )
        self._nvml = nvml_library
        installed = None
        if nvml_library is not None:
            from fakeplugin.drivers.gpu.prepare import nvmldata  # only with the library (claimfiles)

            installed = nvmldata.installed_library(plugin_dir)
        self._files = ClaimFiles(
            driver_name=driver_name,
            cdi_root=cdi_root,
            plugin_dir=plugin_dir,
            device_nodes=device_nodes,
            nvml_library=installed,
        )

    def _startup(self) -> None:
        self._cdi_root.mkdir(parents=True, exist_ok=True)
        self._plugin_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            # No writer is midway: we hold the lock.
            stale.remove_stale_files(
                self._cdi_root, self._plugin_dir, driver_name=self._driver_name, nvml=self._nvml is not None
            )
            # The fake nvidia-smi, replacing an older plugin's version before any spec of ours mounts it:
            # the awk program first (the script runs it, upgraded specs mount it), the script once every
            # spec that mounts it mounts the program too (an earlier script was self-contained).
            smi.install_program(self._plugin_dir)
            claims: Collection[str] = ()
            if self._checkpoint.path.exists():
                # Rewriting it turns an earlier boot's checkpoint into this boot's empty one, once.
                checkpoint = self._checkpoint.load()
                self._checkpoint.save(checkpoint)
                completed = ClaimState.PREPARE_COMPLETED
                self._files.upgrade_specs(u for u, e in checkpoint.claims.items() if e.state is completed)
                claims = checkpoint.claims.keys()
            if self._nvml is not None:
                from fakeplugin.drivers.gpu.prepare import nvmldata  # as in __init__

                # The library before any spec mounts it (a spec of an earlier start mounts the same path).
                nvmldata.install_library(self._plugin_dir, self._nvml)
                # Descriptions of claims the checkpoint no longer holds: unprepared by a plugin without the
                # library, or prepared in an earlier boot.
                self._files.remove_orphan_descriptions(claims)
            smi.install_script(self._plugin_dir)

    def _request(self, claim: Claim) -> GpuRequest | PrepareResult:
        """The claim resolved in this thread (its faults' delay waited here)."""
        try:
            request = self._claims.resolve(claim)
        except Exception as e:  # ClaimError; or a bug, which must fail this claim only, never the RPC
            return _prepare_failed(claim.ref, e)
        if request is None:
            log.info("prepared claim %s: no devices of ours on this node", claim.ref)
            return PrepareResult()
        return request

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID → error ("" = success). Unknown claims succeed; a GET only where a fault can apply."""
        self.open()
        results: dict[str, str] = {}
        refs: list[ClaimRef] = []
        for ref in claims:
            if failure := self._faults.unprepare_failure(ref):
                results[ref.uid] = _unprepare_failed(ref, ClaimError(unprepare_error(ref, failure)))
            else:
                refs.append(ref)
        return results | super().unprepare(refs)

    def claim_devices(self, completed_only: bool = False) -> dict[str, tuple[str, ...]]:
        """Claim UID → its devices' names, as the checkpoint holds them now (`completed_only`: claims in
        PrepareCompleted only)."""
        self.open()
        return {
            uid: tuple(d.device_name for d in entry.devices)
            for uid, entry in self._checkpoint_claims().items()
            if not completed_only or entry.state is ClaimState.PREPARE_COMPLETED
        }

    def _checkpoint_claims(self) -> Mapping[str, cp.ClaimEntry]:
        return self._checkpoint.load().claims

    def _prepare_unlocked(self, ref: ClaimRef, message: str) -> PrepareResult:
        return _prepare_failed(ref, ClaimError(message))

    def _unprepare_unlocked(self, ref: ClaimRef, message: str) -> str:
        return _unprepare_failed(ref, ClaimError(message))

    # -- under the lock: one batch --------------------------------------------------------------------------

    def _prepare_locked(self, requests: list[GpuRequest]) -> dict[str, PrepareResult]:
        log.debug("prepare batch of %d claims", len(requests))
        results: dict[str, PrepareResult] = {}
        try:
            checkpoint = self._checkpoint.load()
        except cp.CheckpointError as e:
            for r in requests:
                failure = ClaimError(prepare_error(r.ref, f"unable to get checkpoint: {e}"))
                results[r.ref.uid] = _prepare_failed(r.ref, failure)
            return results
        before = checkpoint
        started: list[GpuRequest] = []
        for r in requests:
            try:
                checkpoint = self._started(r, checkpoint, results, {s.ref.uid for s in started})
            except Exception as e:  # ClaimError; a bug fails this claim only
                results[r.ref.uid] = _prepare_failed(r.ref, e)
                continue
            if r.ref.uid not in results:
                started.append(r)
        if checkpoint is not before and (failure := self._save(checkpoint)):
            for r in started:
                results[r.ref.uid] = _prepare_failed(r.ref, ClaimError(prepare_error(r.ref, failure)))
            return results
        completed: list[GpuRequest] = []
        for r in started:
            try:
                settings = self._claims.device_settings(r)
                self._files.write(r.ref, r.prepared, r.pool, settings)
            except Exception as e:  # stays PrepareStarted: rolled back by the next attempt
                results[r.ref.uid] = _prepare_failed(r.ref, e)
                continue
            entry = replace(
                checkpoint.claims[r.ref.uid], state=ClaimState.PREPARE_COMPLETED, settings=settings
            )
            checkpoint = checkpoint.with_claim(r.ref.uid, entry)
            completed.append(r)
        failure = self._save(checkpoint) if completed else ""
        for r in completed:
            if failure:
                results[r.ref.uid] = _prepare_failed(r.ref, ClaimError(prepare_error(r.ref, failure)))
            else:
                log.info("prepared claim %s: %s", r.ref, ", ".join(d.device_name for d in r.prepared))
                results[r.ref.uid] = PrepareResult(devices=r.prepared)
        return results

    def _started(
        self, r: GpuRequest, checkpoint: cp.Checkpoint, results: dict[str, PrepareResult], batch: set[str]
    ) -> cp.Checkpoint:
        """The checkpoint with `r` in PrepareStarted; or `r` answered in `results` (already prepared).

        `batch`: the claims this batch started before `r` (the real driver, one claim at a time, would have
        completed them already)."""
        uid = r.ref.uid
        entry = checkpoint.claims.get(uid)
        if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
            if not self._files.present(r.ref, entry.devices):
                # e.g. a reboot emptied a tmpfs CDI root while the checkpoint survived
                log.info(
                    "claim %s is prepared but its CDI spec or data files are missing: writing them", r.ref
                )
                self._files.write(r.ref, entry.devices, r.pool, entry.settings)
            results[uid] = PrepareResult(devices=entry.devices)
            return checkpoint
        # Before any rollback, as upstream.
        devices = [d.device_name for d in r.prepared]
        config_of, stored_configs = self._claims.configs(r)
        if overlap := conflict(
            uid, devices, r.admin_devices, checkpoint, completed=batch, config_of=config_of
        ):
            raise ClaimError(prepare_error(r.ref, f"unable to prepare claim {uid}: {overlap}"))
        if entry is not None:  # PrepareStarted: an earlier attempt died midway; undo it and start over
            log.info("claim %s was left in %s: rolling back and preparing again", r.ref, entry.state)
            self._files.remove(r.ref, entry.devices, prepare_error)
            checkpoint = checkpoint.without_claim(uid)
        started = cp.ClaimEntry(
            ClaimState.PREPARE_STARTED,
            r.ref.namespace,
            r.ref.name,
            r.prepared,
            admin_devices=r.admin_devices,
            configs=stored_configs(),
        )
        return checkpoint.with_claim(uid, started)

    def _unprepare_locked(self, refs: list[ClaimRef]) -> dict[str, str]:
        results: dict[str, str] = {}
        try:
            checkpoint = self._checkpoint.load()
        except cp.CheckpointError as e:
            for ref in refs:
                failure = ClaimError(unprepare_error(ref, f"unable to get checkpoint: {e}"))
                results[ref.uid] = _unprepare_failed(ref, failure)
            return results
        removed: list[ClaimRef] = []
        for ref in refs:
            entry = checkpoint.claims.get(ref.uid)
            if entry is None:
                log.info("unprepare %s: not prepared on this node, nothing to do", ref)
                results[ref.uid] = ""
                continue
            try:
                self._files.remove(ref, entry.devices)
            except Exception as e:  # ClaimError; a bug fails this claim only
                results[ref.uid] = _unprepare_failed(ref, e)
                continue
            checkpoint = checkpoint.without_claim(ref.uid)
            removed.append(ref)
            log.info("unprepared claim %s (was %s)", ref, entry.state)
        failure = self._save(checkpoint) if removed else ""
        for ref in removed:
            results[ref.uid] = (
                _unprepare_failed(ref, ClaimError(unprepare_error(ref, failure))) if failure else ""
            )
        return results

    def _save(self, checkpoint: cp.Checkpoint) -> str:
        """Write the checkpoint; the failure, naming the file, or ""."""
        try:
            self._checkpoint.save(checkpoint)
        except OSError as e:
            return f"unable to update checkpoint {self._checkpoint.path}: {e}"
        return ""


def _prepare_failed(ref: ClaimRef, error: Exception) -> PrepareResult:
    return PrepareResult(error=_failure("prepare", ref, error, prepare_error))


def _unprepare_failed(ref: ClaimRef, error: Exception) -> str:
    return _failure("unprepare", ref, error, unprepare_error)


def _failure(operation: str, ref: ClaimRef, error: Exception, wrap: Callable[[ClaimRef, str], str]) -> str:
    """The message a failed claim reports, logged; a ClaimError's own text, else a bug's (with its trace)."""
    if isinstance(error, ClaimError):
        log.error("%s %s: %s", operation, ref, error)
        return str(error)
    log.error("%s %s: unexpected failure", operation, ref, exc_info=error)
    return wrap(ref, str(error))
