"""Prepared-claim state: the checkpoint data, its JSON form (pure), and its file in the plugin dir.

File `<plugin_dir>/checkpoint.json`, written atomically (mode 0600):

    {
      "version": 1,
      "nodeBootID": "<content of /proc/sys/kernel/random/boot_id>",
      "preparedClaims": {
        "<claimUID>": {
          "state": "PrepareStarted" | "PrepareCompleted",
          "namespace": "...", "name": "...",
          "devices": [{"poolName", "deviceName", "requestNames": [...], "cdiDeviceIDs": [...], "shareID"?}],
          "adminAccessDevices"?: ["<deviceName>", ...]  (allocated with adminAccess only; absent: none)
          "configs"?: {"<deviceName>": {"kind": "GpuConfig" | "MigDeviceConfig", "spec": {...}}}
                       (each device's normalized opaque config; only written with consumable shares on)
          "settings"?: {"<deviceName>": {"strategy": "TimeSlicing" | "MPS" | "" (VFIO), "timesliceInterval"?,
                         "mpsControlDaemon"?, "mpsActiveThreadPercentage"?, "mpsPinnedDeviceMemoryLimit"?,
                         "mpsMultiUser"?, "iommuBackendPolicy"?, "iommuEnableAPIDevice"?}}
                       (what its opaque config applied, typed; only devices with any)
        }
      },
      "driverRelease"?: "<the NVIDIA release the writer emulated>" (absent: fakeplugin before 0.5.0 support),
      "checksum": "sha256:<hex of the canonical JSON (sorted keys, no spaces) of everything but checksum>"
    }

Loading rules (the real driver's, v0.4+):
- no file: empty checkpoint;
- written during another boot (`nodeBootID` differs): empty checkpoint, logged — a reboot undid every
  preparation, and the kubelet prepares running pods' claims again;
- version 1 (fakeplugin 0.1, settings kept as env strings under `configEnv`): read, those strings dropped
  (logged): they only matter if a prepared claim's CDI spec must be written again;
- corrupt (not JSON, wrong shape, checksum mismatch) or unknown version: `CheckpointError` naming the file.
  Never discarded silently: as with the real driver (`checkpoint is corrupted`), prepare and unprepare fail
  until an operator inspects and removes the file;
- written by an emulated release whose NVIDIA checkpoint the reading release re-marshals differently
  (`releases.DriverRelease.checkpoint_mps_id_omitempty`, see `_release_mismatch`): `CheckpointError`, as
  the real driver's checksum check fails, before the boot ID is looked at.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fakeplugin import releases
from fakeplugin.atomicfile import write_atomic
from fakeplugin.model import ClaimState, DeviceSettings, PreparedDevice
from fakeplugin.releases import DriverRelease

log = logging.getLogger(__name__)

FILE_NAME = "checkpoint.json"
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
FILE_MODE = 0o600
CHECKSUM_PREFIX = "sha256:"


# The states the GPU plugin writes; any other is an unknown state here.
STATES = frozenset({ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED})


@dataclass(frozen=True)
class ClaimEntry:
    state: ClaimState
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]
    # Device name → what its opaque config applied (prepare.opaqueconfig), so that a spec written again
    # for a prepared claim carries the settings of the original preparation.
    settings: Mapping[str, DeviceSettings] = field(default_factory=dict)
    # Devices every result of ours allocated with `adminAccess: true`: they never block another claim
    # (runtime.allocation.AllocatedDevice). Checkpoints written before fakeplugin knew admin access have none.
    admin_devices: frozenset[str] = frozenset()
    # Device name → its normalized opaque config ({"kind", "spec"}: prepare.opaqueconfig.DeviceConfig), kept
    # while consumable shares are on: a device is shared only by claims whose configs for it are equal.
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Checkpoint:
    node_boot_id: str
    claims: Mapping[str, ClaimEntry] = field(default_factory=dict)  # key: claim UID
    # The release (fakeplugin.releases name) the writer emulated; "" when it did not say.
    driver_release: str = ""

    def with_claim(self, uid: str, entry: ClaimEntry) -> Checkpoint:
        return replace(self, claims={**self.claims, uid: entry})

    def without_claim(self, uid: str) -> Checkpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})


class CheckpointError(Exception):
    """The checkpoint file cannot be used (corrupt, unsupported); the message names the file."""


# ---------------------------------------------------------------------------------------------------------
# JSON form (pure).


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _canonical(payload: Any) -> str:
    return _CANONICAL.encode(payload)


def _checksum(payload: Mapping[str, Any]) -> str:
    return CHECKSUM_PREFIX + hashlib.sha256(_canonical(payload).encode()).hexdigest()


def _device_json(device: PreparedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "poolName": device.pool_name,
        "deviceName": device.device_name,
        "requestNames": list(device.request_names),
        "cdiDeviceIDs": list(device.cdi_device_ids),
    }
    if device.share_id is not None:
        out["shareID"] = device.share_id
    return out


def _claim_json(entry: ClaimEntry) -> dict[str, Any]:
    out: dict[str, Any] = {
        "state": entry.state.value,
        "namespace": entry.namespace,
        "name": entry.name,
        "devices": [_device_json(d) for d in entry.devices],
    }
    if entry.admin_devices:
        out["adminAccessDevices"] = sorted(entry.admin_devices)
    if entry.configs:
        out["configs"] = {device: dict(config) for device, config in entry.configs.items()}
    if entry.settings:
        out["settings"] = {device: _settings_json(s) for device, s in entry.settings.items()}
    return out


# DeviceSettings field → (JSON key, JSON types it may have); None values are left out.
_SETTINGS_FIELDS: dict[str, tuple[str, tuple[type, ...]]] = {
    "strategy": ("strategy", (str,)),
    "timeslice_interval": ("timesliceInterval", (str,)),
    "mps_control_daemon": ("mpsControlDaemon", (str,)),
    "mps_active_thread_percentage": ("mpsActiveThreadPercentage", (int,)),
    "mps_pinned_device_memory_limit": ("mpsPinnedDeviceMemoryLimit", (str,)),
    "mps_multi_user": ("mpsMultiUser", (bool,)),
    "iommu_backend_policy": ("iommuBackendPolicy", (str,)),
    "iommu_api_device": ("iommuEnableAPIDevice", (bool,)),
}


def _settings_json(settings: DeviceSettings) -> dict[str, Any]:
    values = {key: getattr(settings, name) for name, (key, _) in _SETTINGS_FIELDS.items()}
    return {key: value for key, value in values.items() if value is not None and value is not False}


# Claim UID → (entry, its canonical `"uid":{...}` member) of an earlier encode. Entries are immutable: the
# same object always encodes to the same text.
Fragments = dict[str, tuple[ClaimEntry, str]]


def encode(checkpoint: Checkpoint, fragments: Fragments | None = None) -> bytes:
    """One line of compact JSON: the canonical form (sorted keys, no spaces) with the checksum as its last
    member. `fragments` (kept by the caller between encodes, updated here) saves encoding again the claims
    an earlier checkpoint had: a Prepare rewrites every claim of the node twice (docs/benchmarks.md)."""
    if fragments is None:
        fragments = {}
    claims: list[str] = []
    for uid in sorted(checkpoint.claims):
        entry = checkpoint.claims[uid]
        known = fragments.get(uid)
        if known is None or known[0] is not entry:
            known = fragments[uid] = (entry, f"{_canonical(uid)}:{_canonical(_claim_json(entry))}")
        claims.append(known[1])
    for uid in fragments.keys() - checkpoint.claims.keys():
        del fragments[uid]
    # The members of `_canonical(payload)` in its (sorted) order, the claims' object built from fragments.
    release = f'"driverRelease":{_canonical(checkpoint.driver_release)},' if checkpoint.driver_release else ""
    canonical = (
        f'{{{release}"nodeBootID":{_canonical(checkpoint.node_boot_id)},'
        f'"preparedClaims":{{{",".join(claims)}}},"version":{FORMAT_VERSION}}}'
    )
    checksum = CHECKSUM_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()
    return (canonical[:-1] + f',"checksum":"{checksum}"}}\n').encode()


def decode(data: bytes, *, source: Path) -> Checkpoint:
    """Parse and verify a checkpoint; `source` only names the file in errors."""
    corrupt = f"checkpoint {source} is corrupted"
    try:
        document = json.loads(data)
    except ValueError as e:  # bad JSON or bad UTF-8
        raise CheckpointError(f"{corrupt}: not valid JSON: {e}") from e
    if not isinstance(document, dict):
        raise CheckpointError(f"{corrupt}: top level must be a JSON object")
    version = document.get("version")
    if version not in READABLE_VERSIONS:
        raise CheckpointError(
            f"checkpoint {source} has version {version!r}; this fakeplugin reads "
            + " and ".join(map(str, READABLE_VERSIONS))
        )
    payload = {k: v for k, v in document.items() if k != "checksum"}
    recorded, computed = document.get("checksum"), _checksum(payload)
    if recorded != computed:
        raise CheckpointError(f"{corrupt}: checksum mismatch (recorded {recorded!r}, computed {computed!r})")
    reader = _Reader(corrupt)
    claims_json = reader.get(payload, "preparedClaims", dict, "")
    return Checkpoint(
        node_boot_id=reader.get(payload, "nodeBootID", str, ""),
        claims={uid: reader.claim(entry, f"preparedClaims.{uid}") for uid, entry in claims_json.items()},
        driver_release=reader.get(payload, "driverRelease", str, "") if "driverRelease" in payload else "",
    )


def _release_mismatch(checkpoint: Checkpoint, reader: DriverRelease) -> str:
    """Why NVIDIA's driver of release `reader` fails the checksum of the checkpoint that the release which
    wrote `checkpoint` would have written, or "".

    Each prepared device group's `configState` has `mpsControlDaemonID`, "" unless MPS was applied;
    with `omitempty` (0.5.0-dev) the empty ID is left out. The reader re-marshals what it decoded and
    hashes that (cmd/gpu-kubelet-plugin/checkpoint.go `VerifyChecksumV1`/`V2`), so a completed claim with a
    device not using MPS hashes differently when writer and reader disagree on the tag: upgrading v0.4.x
    to main before PR #1326 failed so (the PR's log: `"configState": {"mpsControlDaemonID": ""}` on disk,
    `{}` re-marshaled). Claims still `PrepareStarted` have no device groups yet.
    """
    writer = releases.RELEASES.get(checkpoint.driver_release)
    if writer is None or writer.checkpoint_mps_id_omitempty == reader.checkpoint_mps_id_omitempty:
        return ""
    for uid, entry in sorted(checkpoint.claims.items()):
        without_mps = [d.device_name for d in entry.devices if _strategy(entry, d.device_name) != "MPS"]
        if entry.state is ClaimState.PREPARE_COMPLETED and without_mps:
            return (
                f"checkpoint failed checksum verification: claim {uid} (device {without_mps[0]}) was "
                f"written by NVIDIA driver {writer.tag or writer.name}, which "
                + ("omits" if writer.checkpoint_mps_id_omitempty else "writes")
                + f" an empty configState.mpsControlDaemonID; {reader.tag or reader.name} re-marshals it "
                + ("without it" if reader.checkpoint_mps_id_omitempty else 'as ""')
            )
    return ""


def _strategy(entry: ClaimEntry, device: str) -> str | None:
    settings = entry.settings.get(device)
    return settings.strategy if settings is not None else None


class _Reader:
    """Typed field access that reports the field path (`where`: path of the object) of anything malformed."""

    def __init__(self, corrupt: str) -> None:
        self._corrupt = corrupt

    def fail(self, path: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self._corrupt}: {path}: {problem}")

    def get(self, obj: Any, key: str, kind: type, where: str) -> Any:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected a JSON object, got {obj!r}")
        value = obj.get(key)
        if not isinstance(value, kind):
            raise self.fail(f"{where}.{key}".lstrip("."), f"expected {kind.__name__}, got {value!r}")
        return value

    def strings(self, obj: Any, key: str, where: str) -> tuple[str, ...]:
        values = self.get(obj, key, list, where)
        if not all(isinstance(v, str) for v in values):
            raise self.fail(f"{where}.{key}", f"expected a list of strings, got {values!r}")
        return tuple(values)

    def claim(self, obj: Any, where: str) -> ClaimEntry:
        state = self.get(obj, "state", str, where)
        if state not in STATES:
            raise self.fail(f"{where}.state", f"unknown state {state!r}")
        devices = self.get(obj, "devices", list, where)
        return ClaimEntry(
            state=ClaimState(state),
            namespace=self.get(obj, "namespace", str, where),
            name=self.get(obj, "name", str, where),
            devices=tuple(self.device(d, f"{where}.devices[{i}]") for i, d in enumerate(devices)),
            settings=self.settings(obj, where),
            admin_devices=frozenset(self.strings(obj, "adminAccessDevices", where))
            if "adminAccessDevices" in obj
            else frozenset(),
            configs=self.configs(obj, where),
        )

    def configs(self, obj: dict, where: str) -> dict[str, dict[str, Any]]:
        if "configs" not in obj:
            return {}
        by_device = self.get(obj, "configs", dict, where)
        out: dict[str, dict[str, Any]] = {}
        for device in by_device:
            config = self.get(by_device, device, dict, f"{where}.configs")
            path = f"{where}.configs.{device}"
            out[device] = {
                "kind": self.get(config, "kind", str, path),
                "spec": self.get(config, "spec", dict, path),
            }
        return out

    def settings(self, obj: dict, where: str) -> dict[str, DeviceSettings]:
        if "configEnv" in obj:
            log.warning("%s: settings written by fakeplugin 0.1 (configEnv) are not carried over", where)
        if "settings" not in obj:
            return {}
        by_device = self.get(obj, "settings", dict, where)
        return {device: self.device_settings(by_device, device, f"{where}.settings") for device in by_device}

    def device_settings(self, obj: dict, device: str, where: str) -> DeviceSettings:
        raw = self.get(obj, device, dict, where)
        path = f"{where}.{device}"
        known = {key for key, _ in _SETTINGS_FIELDS.values()}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise self.fail(f"{path}.{unknown[0]}", "unknown field")
        values: dict[str, Any] = {}
        for name, (key, kinds) in _SETTINGS_FIELDS.items():
            if key not in raw and key != "strategy":
                continue
            value = raw.get(key)
            # bool is an int in Python: a percentage of `true` is corrupt, not 1.
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise self.fail(f"{path}.{key}", f"expected {kinds[0].__name__}, got {value!r}")
            values[name] = value
        return DeviceSettings(**values)

    def device(self, obj: Any, where: str) -> PreparedDevice:
        share_id = obj.get("shareID") if isinstance(obj, dict) else None
        if share_id is not None and not isinstance(share_id, str):
            raise self.fail(f"{where}.shareID", f"expected str, got {share_id!r}")
        return PreparedDevice(
            pool_name=self.get(obj, "poolName", str, where),
            device_name=self.get(obj, "deviceName", str, where),
            request_names=self.strings(obj, "requestNames", where),
            cdi_device_ids=self.strings(obj, "cdiDeviceIDs", where),
            share_id=share_id,
        )


# ---------------------------------------------------------------------------------------------------------
# The file. Callers hold the node-wide prep/unprep lock around load → change → save.


def _verified(data: bytes, path: Path, release: DriverRelease | None) -> Checkpoint:
    checkpoint = decode(data, source=path)
    problem = _release_mismatch(checkpoint, release) if release is not None else ""
    if problem:
        raise CheckpointError(f"checkpoint {path} is corrupted: {problem}")
    return checkpoint


def load(path: Path, *, boot_id: str) -> Checkpoint:
    """The checkpoint for this boot: empty when there is no file or it was written during another boot."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Checkpoint(node_boot_id=boot_id)
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e}") from e
    return _for_boot(decode(data, source=path), path, boot_id)


def _for_boot(checkpoint: Checkpoint, path: Path, boot_id: str) -> Checkpoint:
    if checkpoint.node_boot_id != boot_id:
        log.info(
            "checkpoint %s is from boot %s, this is boot %s: starting empty (dropping %d claims: %s)",
            path,
            checkpoint.node_boot_id,
            boot_id,
            len(checkpoint.claims),
            ", ".join(sorted(checkpoint.claims)) or "-",
        )
        return Checkpoint(node_boot_id=boot_id)
    return checkpoint


def save(
    path: Path, checkpoint: Checkpoint, *, sync: bool = True, fragments: Fragments | None = None
) -> None:
    # Durable (`sync`): PrepareStarted is on disk before a claim's CDI spec is written. Either way the
    # rename is atomic, so a writer killed at any point leaves the old checkpoint or the new one.
    write_atomic(path, encode(checkpoint, fragments), mode=FILE_MODE, sync=sync)


class CheckpointFile:
    """The checkpoint of one plugin dir, with the version last read or written kept in memory.

    `load` reads and verifies the file only when another process replaced it since (a rolling update's
    other plugin): every write is a rename, so a new file is a new inode. Callers hold the node lock.
    With `release`, each save records it, and a file another release wrote is read as that release's
    NVIDIA checkpoint would be (`_release_mismatch`).
    """

    def __init__(
        self, path: Path, *, boot_id: str, sync: bool = True, release: DriverRelease | None = None
    ) -> None:
        self.path = path
        self.boot_id = boot_id
        self._sync = sync
        self._release = release
        self._cached: tuple[tuple[int, int, int], Checkpoint] | None = None
        self._fragments: Fragments = {}  # of the last save (encode)

    def load(self) -> Checkpoint:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                signature = (st.st_ino, st.st_size, st.st_mtime_ns)
                if self._cached is not None and self._cached[0] == signature:
                    return self._cached[1]
                data = f.read()
        except FileNotFoundError:
            self._cached = None
            return Checkpoint(node_boot_id=self.boot_id)
        except OSError as e:
            raise CheckpointError(f"cannot read checkpoint {self.path}: {e}") from e
        checkpoint = _for_boot(_verified(data, self.path, self._release), self.path, self.boot_id)
        self._cached = (signature, checkpoint)
        return checkpoint

    def save(self, checkpoint: Checkpoint) -> None:
        self._cached = None  # whatever happens next, the file decides
        if self._release is not None:
            checkpoint = replace(checkpoint, driver_release=self._release.name)
        save(self.path, checkpoint, sync=self._sync, fragments=self._fragments)
        st = os.stat(self.path)
        self._cached = ((st.st_ino, st.st_size, st.st_mtime_ns), checkpoint)
