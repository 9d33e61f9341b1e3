"""Checkpoints across NVIDIA releases: v0.5.0's own file byte for byte (tests/golden/checkpoint/), and how
fakeplugin's checkpoint, written under one emulated release, is read under another (upgrade, downgrade).

The golden is what v0.5.0's gpu-kubelet-plugin writes for one completed claim of one full GPU without MPS,
derived from the Go types and JSON tags (no Go build here): `cmd/gpu-kubelet-plugin/checkpoint.go`
(`Checkpoint`: `checksum`, `v1`, `v2`; `MarshalCheckpoint`, `SetChecksumV1`/`V2`), `checkpointv.go`
(`CheckpointV2`, `PreparedClaimV2`, `CheckpointedDevice`), `prepared.go` (`PreparedDeviceGroup`,
`PreparedDevice`, `PreparedGpu`), `deviceinfo.go` (`GpuInfo`: only `uuid` is serialized), `device_state.go`
(`DeviceConfigState`), and the vendored `k8s.io/api/resource/v1` status types, at main 95932046 of
kubernetes-sigs/dra-driver-nvidia-gpu plus PR #1326 (the v0.5.0 tag is not in the snapshot available here;
docs/driver-releases.md, row 18). The checksum is vendored
`k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum` (FNV-32a of `k8s.io/utils/dump.ForHash`, spew's
`%#v`, of the marshaled bytes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fakeplugin import releases
from fakeplugin.drivers.computedomain.checkpoint import kubelet_checksum
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.model import ClaimState, DeviceSettings, PreparedDevice

GOLDEN = Path(__file__).parent / "golden" / "checkpoint" / "nvidia-v0.5.0.json"
BOOT = "5e5c4a5e-0000-4000-8000-000000000001"


def go_marshal(value: Any) -> bytes:
    """encoding/json's compact form for this document: members in struct order, no HTML-escaped runes."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def verifies(document: dict[str, Any]) -> bool:
    """Both checksums of a decoded NVIDIA checkpoint hold for what the reader re-marshals (VerifyChecksum)."""
    v1_ok = kubelet_checksum(go_marshal({"checksum": 0, "v1": document["v1"]})) == document["checksum"]
    v2 = {**document["v2"], "checksum": 0}
    return v1_ok and kubelet_checksum(go_marshal(v2)) == document["v2"]["checksum"]


def without_empty_mps_ids(value: Any) -> Any:
    """What a reader with `mpsControlDaemonID,omitempty` (main before PR #1326) re-marshals."""
    if isinstance(value, dict):
        return {
            k: without_empty_mps_ids(v)
            for k, v in value.items()
            if not (k == "mpsControlDaemonID" and v == "")
        }
    if isinstance(value, list):
        return [without_empty_mps_ids(v) for v in value]
    return value


def test_the_v0_5_0_golden_is_what_its_go_types_marshal() -> None:
    data = GOLDEN.read_bytes()
    document = json.loads(data)
    assert go_marshal(document) == data  # field order, omitempty, no trailing newline
    assert verifies(document)
    group = document["v2"]["preparedClaims"]["5f0e1d2c-3b4a-4958-8766-554433221100"]["preparedDevices"][0]
    assert group["configState"] == {"mpsControlDaemonID": ""}  # PR #1326: no omitempty
    assert list(document) == ["checksum", "v1", "v2"]
    assert list(document["v2"]) == ["checksum", "preparedClaims", "nodeBootID"]


def test_a_reader_with_omitempty_fails_the_v0_5_0_checksum() -> None:
    """PR #1326's failure: the empty ID on disk, gone when re-marshaled, so both checksums break."""
    document = json.loads(GOLDEN.read_bytes())
    remarshaled = without_empty_mps_ids(document)
    assert remarshaled != document
    assert not verifies(remarshaled)


def entry(state: ClaimState = ClaimState.PREPARE_COMPLETED, strategy: str | None = None) -> cp.ClaimEntry:
    device = PreparedDevice("node-a", "gpu-0", ("gpu",), ("k8s.gpu.nvidia.com/claim=uid-1-gpu-0",))
    settings = {"gpu-0": DeviceSettings(strategy=strategy)} if strategy else {}
    return cp.ClaimEntry(state, "default", "claim-a", (device,), settings=settings)


def write(tmp_path: Path, release: str, claim: cp.ClaimEntry) -> Path:
    path = tmp_path / cp.FILE_NAME
    writer = cp.CheckpointFile(path, boot_id=BOOT, release=releases.get(release))
    writer.save(cp.Checkpoint(node_boot_id=BOOT).with_claim("uid-1", claim))
    return path


def read(path: Path, release: str) -> cp.Checkpoint:
    return cp.CheckpointFile(path, boot_id=BOOT, release=releases.get(release)).load()


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("0.4.1", "0.5.0"),
        ("25.12", "0.5.0"),
        ("0.5.0", "0.4.1"),
        ("0.4.1", "0.4.1"),
        ("0.5.0-dev", "0.5.0-dev"),
    ],
)
def test_releases_that_agree_on_the_checkpoint_read_each_others(
    tmp_path: Path, writer: str, reader: str
) -> None:
    """Upgrading 0.4.1 to 0.5.0 (and back) keeps the prepared claims, as PR #1326 made it."""
    path = write(tmp_path, writer, entry())
    assert read(path, reader).claims["uid-1"] == entry()
    assert json.loads(path.read_bytes())["driverRelease"] == writer


@pytest.mark.parametrize(("writer", "reader"), [("0.4.1", "0.5.0-dev"), ("0.5.0-dev", "0.5.0")])
def test_a_release_that_disagrees_on_the_empty_mps_id_fails_the_checksum(
    tmp_path: Path, writer: str, reader: str
) -> None:
    """0.5.0-dev (main 95932046, before PR #1326) omits the empty ID: a v0.4.x checkpoint fails there, and
    one it wrote fails in v0.5.0; prepare and unprepare fail until the file is removed."""
    path = write(tmp_path, writer, entry())
    with pytest.raises(
        cp.CheckpointError, match="is corrupted: checkpoint failed checksum verification"
    ) as e:
        read(path, reader)
    assert str(path) in str(e.value) and "claim uid-1 (device gpu-0)" in str(e.value)


@pytest.mark.parametrize(
    "claim", [entry(strategy="MPS"), entry(state=ClaimState.PREPARE_STARTED)], ids=["mps", "started"]
)
def test_claims_without_an_empty_mps_id_upgrade_to_0_5_0_dev(tmp_path: Path, claim: cp.ClaimEntry) -> None:
    """An MPS group has a daemon ID either way; a claim still PrepareStarted has no device groups."""
    assert read(write(tmp_path, "0.4.1", claim), "0.5.0-dev").claims["uid-1"] == claim


def test_a_checkpoint_that_names_no_release_is_read_by_any(tmp_path: Path) -> None:
    path = tmp_path / cp.FILE_NAME
    cp.save(path, cp.Checkpoint(node_boot_id=BOOT).with_claim("uid-1", entry()))
    assert "driverRelease" not in json.loads(path.read_bytes())
    assert read(path, "0.5.0-dev").claims["uid-1"] == entry()
