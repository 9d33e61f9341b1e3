"""Prepare and unprepare claims on this node: validation, node-wide locking, checkpoint state machine, CDI.

Prepare, per claim (one claim's failure never touches the others; its message goes into its result):

    validate ref ─▶ GET claim ─▶ our allocated devices ─▶ [lock] read checkpoint
      ├▶ PrepareCompleted: return its devices (CDI spec and nvidia-smi data written again if they vanished)
      └▶ PrepareStarted (an attempt died midway): roll back, then as for a new claim:
    ─▶ overlap check ─▶ write PrepareStarted ─▶ opaque configs (prepare.opaqueconfig: their settings become
    device env) ─▶ nvidia-smi data + CDI spec on disk ─▶ write PrepareCompleted (with the settings' env)

Unprepare, per claim (no API call): [lock] unknown ⇒ success; otherwise remove the CDI spec and the claim's
nvidia-smi data (fakeplugin.prepare.smi), drop the entry. The nvidia-smi script itself is written at start.

The lock is a threading lock (threads of this process) plus an flock on `<plugin_dir>/pu.lock` (other
processes: the old and the new plugin during a rolling update), so every read-modify-write of the checkpoint
sees the previous one's result.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from fakeplugin import featuregates
from fakeplugin.model import ClaimRef, GpuDevice, PreparedDevice, PrepareResult
from fakeplugin.prepare import cdi, opaqueconfig, smi, stale
from fakeplugin.prepare import checkpoint as cp
from fakeplugin.prepare.claims import ClaimError, allocated_devices, validate_claim_ref
from fakeplugin.publish.mig import created_for_claim

log = logging.getLogger(__name__)

LOCK_FILE = "pu.lock"
_LOCK_POLL_S = 0.02


class LockTimeoutError(Exception):
    """The node-wide prep/unprep lock was not acquired in time."""


class Preparer:
    """Prepares and unprepares claims for `driver_name` on `node_name`; safe across threads and processes.

    `devices` (device name → GpuDevice of this node's pool) may be a live mapping; it is read per claim.
    `device_nodes` adds fake /dev/nvidia* character devices to the CDI specs (see fakeplugin.prepare.cdi).
    `feature_gates` (the real driver's, fakeplugin.featuregates) rule what claims' opaque configs may do.
    Construction creates `cdi_root` and `plugin_dir` if needed and loads the checkpoint once, as the real
    driver does at start: a checkpoint from another boot is replaced by an empty one, a corrupt one raises
    `checkpoint.CheckpointError`, an unreadable boot ID file too; a held lock raises `LockTimeoutError`.
    """

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        devices: Mapping[str, GpuDevice],
        get_claim: Callable[[str, str], dict],
        cdi_root: Path,
        plugin_dir: Path,
        boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id"),
        lock_timeout: float = 10.0,
        device_nodes: bool = False,
        feature_gates: Mapping[str, bool] = MappingProxyType(featuregates.KNOWN),
    ) -> None:
        self._driver_name = driver_name
        self._node_name = node_name
        self._devices = devices  # may be live (the inventory): read afresh for every claim
        self._get_claim = get_claim
        self._cdi_root = cdi_root
        self._plugin_dir = plugin_dir
        self._checkpoint_path = plugin_dir / cp.FILE_NAME
        self._lock_path = plugin_dir / LOCK_FILE
        self._lock_timeout = lock_timeout
        self._device_nodes = device_nodes
        self._feature_gates = dict(feature_gates)
        self._thread_lock = threading.Lock()
        self._boot_id = cp.read_boot_id(boot_id_file)
        cdi_root.mkdir(parents=True, exist_ok=True)
        plugin_dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            stale.remove_stale_files(cdi_root, plugin_dir, driver_name=driver_name)  # no writer is midway
            smi.install_script(plugin_dir)  # before any spec mounts it; replaces an older plugin's version
            if self._checkpoint_path.exists():
                # Rewriting it turns an earlier boot's checkpoint into this boot's empty one, once.
                cp.save(self._checkpoint_path, cp.load(self._checkpoint_path, boot_id=self._boot_id))

    # -- public ---------------------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """One result per claim UID; claims are handled one after the other, each under the node lock."""
        return {ref.uid: self._prepare_one(ref) for ref in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Claim UID → error ("" = success). Unknown claims succeed; no API calls."""
        return {ref.uid: self._unprepare_one(ref) for ref in claims}

    # -- prepare --------------------------------------------------------------------------------------------

    def _prepare_one(self, ref: ClaimRef) -> PrepareResult:
        try:
            devices = self._prepare_claim(ref)
        except ClaimError as e:
            log.error("prepare %s: %s", ref, e)
            return PrepareResult(error=str(e))
        except Exception as e:  # a bug must fail this claim only, never the whole RPC
            log.exception("prepare %s: unexpected failure", ref)
            return PrepareResult(error=f"error preparing devices for claim {ref}: {e}")
        log.info("prepared claim %s: %s", ref, ", ".join(d.device_name for d in devices) or "no devices")
        return PrepareResult(devices=devices)

    def _prepare_claim(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        validate_claim_ref(ref)
        try:
            claim = self._get_claim(ref.namespace, ref.name)
        except Exception as e:  # whatever the API client raises
            raise ClaimError(f"retrieve claim {ref.namespace}/{ref.name}: {e}") from e
        wanted = allocated_devices(claim, ref, driver_name=self._driver_name, pool_name=self._node_name)
        if not wanted:
            return ()  # nothing of ours on this node: no checkpoint entry, no CDI spec
        pool = dict(self._devices)  # one consistent view for this claim
        unknown = [name for name in wanted if name not in pool]
        if unknown:
            known = ", ".join(sorted(pool)) or "none"
            message = f"allocated device {unknown[0]} does not exist in pool {self._node_name} (has: {known})"
            raise ClaimError(_prepare_error(ref, f"prepare devices failed: {message}"))
        prepared = tuple(
            PreparedDevice(
                pool_name=self._node_name,
                device_name=name,
                request_names=requests,
                cdi_device_ids=(cdi.cdi_device_id(ref.uid, name, driver_name=self._driver_name),),
            )
            for name, requests in wanted.items()
        )
        with self._claim_lock():
            return self._prepare_locked(ref, prepared, pool, claim["status"]["allocation"])

    def _prepare_locked(
        self,
        ref: ClaimRef,
        prepared: tuple[PreparedDevice, ...],
        pool: Mapping[str, GpuDevice],
        allocation: Mapping[str, Any],
    ) -> tuple[PreparedDevice, ...]:
        checkpoint = self._load(ref, _prepare_error)
        spec_path = cdi.spec_path(self._cdi_root, ref.uid, driver_name=self._driver_name)
        entry = checkpoint.claims.get(ref.uid)
        if entry is not None and entry.state is cp.ClaimState.PREPARE_COMPLETED:
            names = [d.device_name for d in entry.devices]
            # e.g. a reboot emptied a tmpfs CDI root while the checkpoint survived
            if not spec_path.exists() or not smi.claim_data_present(self._plugin_dir, ref.uid, names):
                log.info(
                    "claim %s is prepared but its CDI spec %s or nvidia-smi data is missing: writing both",
                    ref,
                    spec_path,
                )
                self._write_spec(ref, entry.devices, pool, spec_path, entry.config_env)
            return entry.devices
        if entry is not None:  # PrepareStarted: an earlier attempt died midway; undo it and start over
            log.info("claim %s was left in %s: rolling back and preparing again", ref, entry.state)
            cdi.remove_spec(spec_path)
            smi.remove_claim_data(self._plugin_dir, ref.uid)
            checkpoint = checkpoint.without_claim(ref.uid)
            self._save(ref, checkpoint, _prepare_error)

        wanted = {d.device_name for d in prepared}
        for other_uid, other in checkpoint.claims.items():
            taken = sorted(wanted & {d.device_name for d in other.devices})
            if taken:
                message = f"requested device {taken[0]} is already allocated to different claim {other_uid}"
                raise ClaimError(_prepare_error(ref, message))

        # Invariant: a CDI spec exists only for a claim the checkpoint holds (at least PrepareStarted), and
        # PrepareCompleted is written only once the spec is on disk.
        started = cp.ClaimEntry(cp.ClaimState.PREPARE_STARTED, ref.namespace, ref.name, prepared)
        self._save(ref, checkpoint.with_claim(ref.uid, started), _prepare_error)
        config_env = self._config_env(ref, allocation, pool)
        self._write_spec(ref, prepared, pool, spec_path, config_env)
        completed = replace(started, state=cp.ClaimState.PREPARE_COMPLETED, config_env=config_env)
        self._save(ref, checkpoint.with_claim(ref.uid, completed), _prepare_error)
        return prepared

    def _config_env(
        self, ref: ClaimRef, allocation: Mapping[str, Any], pool: Mapping[str, GpuDevice]
    ) -> dict[str, tuple[str, ...]]:
        """Device name → the env its opaque config's settings give it (only devices with settings)."""
        try:
            settings = opaqueconfig.device_settings(
                allocation,
                pool,
                driver_name=self._driver_name,
                pool_name=self._node_name,
                claim_uid=ref.uid,
                gates=self._feature_gates,
            )
        except opaqueconfig.OpaqueConfigError as e:
            raise ClaimError(_prepare_error(ref, f"prepare devices failed: {e}")) from e
        return {name: s.env(cdi.device_env_prefix(pool[name])) for name, s in settings.items()}

    def _write_spec(
        self,
        ref: ClaimRef,
        prepared: Sequence[PreparedDevice],
        pool: Mapping[str, GpuDevice],
        path: Path,
        config_env: Mapping[str, Sequence[str]],
    ) -> None:
        missing = [d.device_name for d in prepared if d.device_name not in pool]
        if missing:
            message = f"device {missing[0]} is no longer in pool {self._node_name}"
            raise ClaimError(_prepare_error(ref, f"prepare devices failed: {message}"))
        gpus = [created_for_claim(pool[d.device_name], ref.uid) for d in prepared]  # DynamicMIG: create
        # The spec mounts the data files: they exist before it does.
        data_dir = smi.claim_data_dir(self._plugin_dir, ref.uid)
        try:
            smi.write_claim_data(self._plugin_dir, ref.uid, gpus, config_env)  # compute mode per settings
        except (OSError, ValueError) as e:
            raise ClaimError(
                _prepare_error(ref, f"prepare devices failed: write nvidia-smi data {data_dir}: {e}")
            ) from e
        spec = cdi.claim_spec(
            ref.uid,
            gpus,
            driver_name=self._driver_name,
            device_nodes=self._device_nodes,
            plugin_dir=self._plugin_dir,
            device_env=config_env,
        )
        try:
            cdi.write_spec(path, spec)
        except (OSError, ValueError) as e:
            raise ClaimError(
                _prepare_error(ref, f"prepare devices failed: write CDI spec {path}: {e}")
            ) from e

    # -- unprepare ------------------------------------------------------------------------------------------

    def _unprepare_one(self, ref: ClaimRef) -> str:
        try:
            validate_claim_ref(ref)
        except ClaimError as e:
            # Such a claim can never have been prepared (prepare rejects it too): nothing to undo. Failing
            # would leave its pod Terminating forever.
            log.warning("unprepare %s: nothing to do: %s", ref, e)
            return ""
        try:
            with self._claim_lock():
                self._unprepare_locked(ref)
        except ClaimError as e:
            log.error("unprepare %s: %s", ref, e)
            return str(e)
        except Exception as e:  # a bug must fail this claim only, never the whole RPC
            log.exception("unprepare %s: unexpected failure", ref)
            return f"error unpreparing devices for claim {ref}: {e}"
        return ""

    def _unprepare_locked(self, ref: ClaimRef) -> None:
        checkpoint = self._load(ref, _unprepare_error)
        entry = checkpoint.claims.get(ref.uid)
        if entry is None:
            log.info("unprepare %s: not prepared on this node, nothing to do", ref)
            return
        spec_path = cdi.spec_path(self._cdi_root, ref.uid, driver_name=self._driver_name)
        try:
            cdi.remove_spec(spec_path)
        except OSError as e:
            raise ClaimError(_unprepare_error(ref, f"remove CDI spec {spec_path}: {e}")) from e
        data_dir = smi.claim_data_dir(self._plugin_dir, ref.uid)
        try:
            smi.remove_claim_data(self._plugin_dir, ref.uid)  # after the spec that mounts it
        except OSError as e:
            raise ClaimError(_unprepare_error(ref, f"remove nvidia-smi data {data_dir}: {e}")) from e
        self._save(ref, checkpoint.without_claim(ref.uid), _unprepare_error)
        log.info("unprepared claim %s (was %s)", ref, entry.state)

    # -- shared ---------------------------------------------------------------------------------------------

    def _load(self, ref: ClaimRef, wrap: Callable[[ClaimRef, str], str]) -> cp.Checkpoint:
        try:
            return cp.load(self._checkpoint_path, boot_id=self._boot_id)
        except cp.CheckpointError as e:
            raise ClaimError(wrap(ref, f"unable to get checkpoint: {e}")) from e

    def _save(self, ref: ClaimRef, checkpoint: cp.Checkpoint, wrap: Callable[[ClaimRef, str], str]) -> None:
        try:
            cp.save(self._checkpoint_path, checkpoint)
        except OSError as e:
            raise ClaimError(wrap(ref, f"unable to update checkpoint {self._checkpoint_path}: {e}")) from e

    @contextmanager
    def _claim_lock(self) -> Iterator[None]:
        """The node lock for one claim; a timeout fails that claim with the real driver's text."""
        try:
            with self._locked():
                yield
        except LockTimeoutError as e:
            raise ClaimError(f"error acquiring prep/unprep lock: {e}") from e

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The node-wide prep/unprep lock, waiting at most lock_timeout seconds in all."""
        deadline = time.monotonic() + self._lock_timeout
        if not self._thread_lock.acquire(timeout=self._lock_timeout):
            raise LockTimeoutError(f"timed out after {self._lock_timeout}s waiting for this process's lock")
        try:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                _flock(fd, deadline, self._lock_path, self._lock_timeout)
                yield
            finally:
                os.close(fd)  # releases the flock
        finally:
            self._thread_lock.release()


def _flock(fd: int, deadline: float, path: Path, timeout: float) -> None:
    # flock has no timeout of its own: poll without blocking until the deadline.
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LockTimeoutError(f"timed out after {timeout}s waiting for flock on {path}") from None
            time.sleep(min(_LOCK_POLL_S, remaining))


def _prepare_error(ref: ClaimRef, message: str) -> str:
    return f"error preparing devices for claim {ref}: {message}"


def _unprepare_error(ref: ClaimRef, message: str) -> str:
    return f"error unpreparing devices for claim {ref}: {message}"
