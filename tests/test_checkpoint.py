"""The prepared-claim checkpoint (drivers.gpu.prepare.checkpoint): JSON form, checksum, boot ID, damage."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.model import ClaimState, PreparedDevice

BOOT = "5e5c4a5e-0000-4000-8000-000000000001"
OTHER_BOOT = "5e5c4a5e-0000-4000-8000-000000000002"


def sample() -> cp.Checkpoint:
    device = PreparedDevice(
        pool_name="node-a",
        device_name="gpu-0",
        request_names=("gpus",),
        cdi_device_ids=("k8s.gpu.nvidia.com/claim=uid-1-gpu-0",),
    )
    shared = PreparedDevice(
        "node-a", "gpu-1", ("a", "b"), ("k8s.gpu.nvidia.com/claim=uid-2-gpu-1",), share_id="s1"
    )
    return (
        cp.Checkpoint(node_boot_id=BOOT)
        .with_claim("uid-1", cp.ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "claim-1", (device,)))
        .with_claim(
            "uid-2",
            cp.ClaimEntry(
                ClaimState.PREPARE_STARTED, "ns", "claim-2", (shared,), admin_devices=frozenset({"gpu-1"})
            ),
        )
    )


def sha256_of(payload: dict[str, Any]) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def test_encode_writes_the_documented_json() -> None:
    document = json.loads(cp.encode(sample()))
    payload = {k: v for k, v in document.items() if k != "checksum"}
    assert payload == {
        "version": 2,
        "nodeBootID": BOOT,
        "preparedClaims": {
            "uid-1": {
                "state": "PrepareCompleted",
                "namespace": "ns",
                "name": "claim-1",
                "devices": [
                    {
                        "poolName": "node-a",
                        "deviceName": "gpu-0",
                        "requestNames": ["gpus"],
                        "cdiDeviceIDs": ["k8s.gpu.nvidia.com/claim=uid-1-gpu-0"],
                    }
                ],
            },
            "uid-2": {
                "state": "PrepareStarted",
                "namespace": "ns",
                "name": "claim-2",
                "devices": [
                    {
                        "poolName": "node-a",
                        "deviceName": "gpu-1",
                        "requestNames": ["a", "b"],
                        "cdiDeviceIDs": ["k8s.gpu.nvidia.com/claim=uid-2-gpu-1"],
                        "shareID": "s1",
                    }
                ],
                "adminAccessDevices": ["gpu-1"],
            },
        },
    }
    assert document["checksum"] == sha256_of(payload)


def test_decode_reverses_encode() -> None:
    assert cp.decode(cp.encode(sample()), source=Path("x")) == sample()


def test_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / cp.FILE_NAME
    cp.save(path, sample())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [cp.FILE_NAME]  # no temp file left behind
    assert cp.load(path, boot_id=BOOT) == sample()


def test_load_without_a_file_is_empty(tmp_path: Path) -> None:
    assert cp.load(tmp_path / cp.FILE_NAME, boot_id=BOOT) == cp.Checkpoint(node_boot_id=BOOT)


def test_load_after_a_reboot_starts_empty_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / cp.FILE_NAME
    cp.save(path, sample())
    with caplog.at_level(logging.INFO, logger="fakeplugin.drivers.gpu.prepare.checkpoint"):
        assert cp.load(path, boot_id=OTHER_BOOT) == cp.Checkpoint(node_boot_id=OTHER_BOOT)
    assert (
        f"is from boot {BOOT}, this is boot {OTHER_BOOT}: starting empty (dropping 2 claims: uid-1, uid-2)"
        in (caplog.text)
    )


def corrupt_variants() -> list[tuple[bytes, str]]:
    good = json.loads(cp.encode(sample()))
    tampered = json.loads(cp.encode(sample()))
    tampered["preparedClaims"]["uid-1"]["devices"][0]["deviceName"] = "gpu-7"  # checksum left as it was
    bad_state = {k: v for k, v in good.items() if k != "checksum"}
    bad_state["preparedClaims"]["uid-1"]["state"] = "Prepared"
    bad_state["checksum"] = sha256_of({k: v for k, v in bad_state.items() if k != "checksum"})
    bad_device = {k: v for k, v in json.loads(cp.encode(sample())).items() if k != "checksum"}
    bad_device["preparedClaims"]["uid-2"]["devices"][0]["requestNames"] = "a"
    bad_device["checksum"] = sha256_of({k: v for k, v in bad_device.items() if k != "checksum"})
    bad_admin = {k: v for k, v in json.loads(cp.encode(sample())).items() if k != "checksum"}
    bad_admin["preparedClaims"]["uid-2"]["adminAccessDevices"] = [1]
    bad_admin["checksum"] = sha256_of(bad_admin)
    return [
        (b'{"version": 1, "nodeBo', "is corrupted: not valid JSON: "),
        (b"[]", "is corrupted: top level must be a JSON object"),
        (json.dumps(tampered).encode(), "is corrupted: checksum mismatch (recorded 'sha256:"),
        (
            json.dumps(bad_state).encode(),
            "is corrupted: preparedClaims.uid-1.state: unknown state 'Prepared'",
        ),
        (
            json.dumps(bad_device).encode(),
            "is corrupted: preparedClaims.uid-2.devices[0].requestNames: expected list, got 'a'",
        ),
        (
            json.dumps(bad_admin).encode(),
            "is corrupted: preparedClaims.uid-2.adminAccessDevices: expected a list of strings, got [1]",
        ),
        (json.dumps({**good, "version": 3}).encode(), "has version 3; this fakeplugin reads 1 and 2"),
    ]


@pytest.mark.parametrize(("data", "message"), corrupt_variants())
def test_load_refuses_a_corrupt_checkpoint_naming_the_file(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / cp.FILE_NAME
    path.write_bytes(data)
    with pytest.raises(cp.CheckpointError) as caught:
        cp.load(path, boot_id=BOOT)
    assert str(caught.value).startswith(f"checkpoint {path} ")
    assert message in str(caught.value)
    assert path.read_bytes() == data  # left for an operator to inspect


def test_a_version_1_checkpoint_loads_without_its_env_strings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """fakeplugin 0.1 kept sharing settings as env strings (`configEnv`); an upgrade still reads it."""
    payload = {k: v for k, v in json.loads(cp.encode(sample())).items() if k != "checksum"}
    payload["version"] = 1
    payload["preparedClaims"]["uid-1"]["configEnv"] = {"gpu-0": ["FAKEPLUGIN_GPU_0_SHARING_STRATEGY=MPS"]}
    path = tmp_path / cp.FILE_NAME
    path.write_text(json.dumps({**payload, "checksum": sha256_of(payload)}))
    with caplog.at_level(logging.WARNING, logger="fakeplugin.drivers.gpu.prepare.checkpoint"):
        loaded = cp.load(path, boot_id=BOOT)
    assert loaded == sample()
    assert (
        "preparedClaims.uid-1: settings written by fakeplugin 0.1 (configEnv) are not carried over"
        in caplog.text
    )


@pytest.mark.parametrize("sync", [True, False])
def test_a_checkpoint_is_fsynced_unless_its_owner_is_a_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    """`serve` syncs before the rename, as the kubelet's store does; the fleet does not (its nodes'
    checkpoints are per boot, and the rename alone survives a kill -9): commands/fleet.py."""
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    path = tmp_path / cp.FILE_NAME
    cp.CheckpointFile(path, boot_id=BOOT, sync=sync).save(sample())
    assert len(synced) == (1 if sync else 0)
    assert cp.load(path, boot_id=BOOT) == sample()
