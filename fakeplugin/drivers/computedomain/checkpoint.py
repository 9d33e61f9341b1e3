"""compute-domain.nvidia.com's checkpoint, `<plugin_dir>/checkpoint.json`, in NVIDIA's own format.

`cmd/compute-domain-kubelet-plugin/checkpoint.go`, `checkpointv.go`, `prepared.go`; the kubelet's
checkpointmanager writes it. The file is Go's `json.Marshal` of

    {"checksum": <v1 sum>, "v1": {"preparedClaims": {<uid>: {status, preparedDevices}}},   # completed only
     "v2": {"checksum": <v2 sum>, "preparedClaims": {<uid>: {checkpointState, status, preparedDevices,
            name, namespace, abortedAt}}, "nodeBootID": "..."}}

`checkpointState` is PrepareStarted, PrepareCompleted or PrepareAborted; `status` the claim's status as
the API server had it; `preparedDevices` the prepared-device groups, each `{"devices": [{"channel":
{"info": {"id": 0}, "device": {Requests, PoolName, DeviceName, CDIDeviceIDs}}, "daemon": null}],
"configState": {"Type": "channel", "ComputeDomain": "<cdUID>"}}`. Empty maps and lists are left out
(omitempty), `status` never is. A sum is the kubelet's checksum.New of the JSON bytes of its part with
the sum set to 0 (v1: the file without v2): FNV-32a over go-spew's `%#v` of a byte slice, which prints
`([]uint8)[123 34 ...]` (checked against the vendored go-spew with Go). Go's encoder escapes <, >, &,
U+2028 and U+2029 in strings; maps are in key order, structs in field order. The legacy 25.3-rc2 format
is not read.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fakeplugin.atomicfile import write_atomic
from fakeplugin.model import ClaimState

log = logging.getLogger(__name__)

FILE_NAME = "checkpoint.json"
FILE_MODE = 0o644  # [U] the mode the kubelet checkpoint store gives the file


class ComputeDomainCheckpointError(Exception):
    """The checkpoint cannot be read; the message is NVIDIA's."""


@dataclass(frozen=True)
class Entry:
    """One claim (PreparedClaimV2); `status` and `devices` in JSON shape, as they go to the file."""

    state: ClaimState
    status: Mapping[str, Any]
    devices: tuple[Mapping[str, Any], ...] = ()  # prepared-device groups
    name: str = ""
    namespace: str = ""
    aborted_at: str = ""  # RFC 3339, seconds, UTC (metav1.Time)

    def to_json(self, *, v1: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {} if v1 else {"checkpointState": self.state.value}
        out["status"] = self.status
        if self.devices:
            out["preparedDevices"] = list(self.devices)
        if v1:
            return out
        out |= {k: v for k, v in (("name", self.name), ("namespace", self.namespace)) if v}
        if self.aborted_at:
            out["abortedAt"] = self.aborted_at
        return out

    def kubelet_devices(self) -> list[Mapping[str, Any]]:
        """The checkpointed kubelet Devices of every group (PreparedDevices.GetDevices)."""
        out = []
        for group in self.devices:
            for device in group.get("devices") or []:
                typed = device.get("channel") or device.get("daemon")
                if typed:
                    out.append(typed["device"])
        return out


@dataclass(frozen=True)
class ComputeDomainCheckpoint:
    boot_id: str = ""
    claims: Mapping[str, Entry] = field(default_factory=dict)

    def with_claim(self, uid: str, entry: Entry) -> ComputeDomainCheckpoint:
        return replace(self, claims={**self.claims, uid: entry})

    def without_claim(self, uid: str) -> ComputeDomainCheckpoint:
        return replace(self, claims={k: v for k, v in self.claims.items() if k != uid})


def go_json(value: Any) -> bytes:
    """`json.Marshal`'s bytes for JSON-shaped `value` whose dicts are already in Go's order."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028")):
        text = text.replace(char, escaped)  # only strings can hold them
    return text.replace("\u2029", "\\u2029").encode()


def kubelet_checksum(data: bytes) -> int:
    """checkpointmanager/checksum.New(data): FNV-32a of go-spew's `%#v` of the byte slice."""
    h = 0x811C9DC5
    for byte in b"([]uint8)[" + b" ".join(str(b).encode() for b in data) + b"]":
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def _v2(checkpoint: ComputeDomainCheckpoint, checksum: int) -> dict[str, Any]:
    v2: dict[str, Any] = {"checksum": checksum}
    if checkpoint.claims:
        v2["preparedClaims"] = {uid: checkpoint.claims[uid].to_json() for uid in sorted(checkpoint.claims)}
    if checkpoint.boot_id:
        v2["nodeBootID"] = checkpoint.boot_id
    return v2


def encode(checkpoint: ComputeDomainCheckpoint) -> bytes:
    """MarshalCheckpoint: v1 derived from v2 (completed claims only), both checksums set."""
    completed = {
        u: e for u, e in sorted(checkpoint.claims.items()) if e.state is ClaimState.PREPARE_COMPLETED
    }
    v1: dict[str, Any] = (
        {"preparedClaims": {u: e.to_json(v1=True) for u, e in completed.items()}} if completed else {}
    )
    v1_sum = kubelet_checksum(go_json({"checksum": 0, "v1": v1}))
    v2_sum = kubelet_checksum(go_json(_v2(checkpoint, 0)))
    return go_json({"checksum": v1_sum, "v1": v1, "v2": _v2(checkpoint, v2_sum)})


def decode(data: bytes) -> ComputeDomainCheckpoint:
    """The file's content; ComputeDomainCheckpointError for what the kubelet's store rejects (checksum
    mismatch: `checkpoint is corrupted`). A v1-only file (an older plugin) reads as its claims
    PrepareCompleted."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        v1, v2 = doc.get("v1"), doc.get("v2")
        if kubelet_checksum(
            go_json({"checksum": 0, "v1": v1} if v1 is not None else {"checksum": 0})
        ) != doc.get("checksum"):
            raise ComputeDomainCheckpointError("checkpoint is corrupted")
        if v2 is None:
            claims = (v1 or {}).get("preparedClaims") or {}
            return ComputeDomainCheckpoint(
                claims={
                    u: _entry({**c, "checkpointState": ClaimState.PREPARE_COMPLETED.value})
                    for u, c in claims.items()
                }
            )
        if kubelet_checksum(go_json({**v2, "checksum": 0})) != v2.get("checksum"):
            raise ComputeDomainCheckpointError("checkpoint is corrupted")
        claims = v2.get("preparedClaims") or {}
        return ComputeDomainCheckpoint(v2.get("nodeBootID") or "", {u: _entry(c) for u, c in claims.items()})
    except ComputeDomainCheckpointError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ComputeDomainCheckpointError(f"failed to unmarshal checkpoint: {e}") from None


def _entry(c: Mapping[str, Any]) -> Entry:
    return Entry(
        state=ClaimState(c["checkpointState"]),
        status=c.get("status") or {},
        devices=tuple(c.get("preparedDevices") or ()),
        name=c.get("name") or "",
        namespace=c.get("namespace") or "",
        aborted_at=c.get("abortedAt") or "",
    )


class ComputeDomainCheckpointFile:
    """The checkpoint on disk. Only read and written under the node lock: every write is a read-modify-
    write of the previous content (DeviceState.updateCheckpoint)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def exists(self) -> bool:
        return self.path.exists()

    def load(self) -> ComputeDomainCheckpoint:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return ComputeDomainCheckpoint()
        except OSError as e:
            raise ComputeDomainCheckpointError(f"failed to read checkpoint {self.path}: {e}") from e
        return decode(data)

    def save(self, checkpoint: ComputeDomainCheckpoint) -> None:
        """Atomically, fsynced first (the kubelet's store): the file outlives a crash or power loss."""
        write_atomic(self.path, encode(checkpoint), mode=FILE_MODE)
