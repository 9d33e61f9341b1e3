"""Prepare with opaque device configs (prepare.preparer + prepare.opaqueconfig) over real files: their
settings reach the CDI spec as device env and the checkpoint; bad configs fail the claim with the real chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fakeplugin import releases
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.model import ClaimRef, ClaimState, DeviceSettings
from tests.harness.prepare import BOOT, Node, gpu, opaque, ref, result, timeslicing, with_configs

TS_ON = {"TimeSlicingSettings": True}
V25_12, V0_4_1 = releases.get("25.12"), releases.get("0.4.1")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def device_env(node: Node, claim: ClaimRef) -> dict[str, list[str]]:
    spec = yaml.safe_load(node.spec_path(claim).read_text())
    return {d["name"].removeprefix(f"{claim.uid}-"): d["containerEdits"]["env"] for d in spec["devices"]}


def test_timeslicing_settings_become_device_env_and_are_checkpointed(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1", "shared"), result("gpu-2", "plain"))
    with_configs(node, claim, opaque(timeslicing("Long"), "shared"))

    results = node.preparer(feature_gates=TS_ON, release=V0_4_1).prepare([claim])

    assert results[claim.uid].error == ""
    expected = ("FAKEPLUGIN_GPU_1_SHARING_STRATEGY=TimeSlicing", "FAKEPLUGIN_GPU_1_TIMESLICE_INTERVAL=Long")
    assert device_env(node, claim) == {
        "gpu-1": [f"FAKEPLUGIN_GPU_1_UUID={gpu(1).uuid}", "FAKEPLUGIN_GPU_1_DEVICE=gpu-1", *expected],
        "gpu-2": [f"FAKEPLUGIN_GPU_2_UUID={gpu(2).uuid}", "FAKEPLUGIN_GPU_2_DEVICE=gpu-2"],
    }
    entry = node.checkpoint().claims[claim.uid]
    assert entry.state is ClaimState.PREPARE_COMPLETED
    assert entry.settings == {"gpu-1": DeviceSettings("TimeSlicing", timeslice_interval="Long")}
    stored = json.loads((node.plugin_dir / cp.FILE_NAME).read_text())["preparedClaims"][claim.uid]
    assert stored["settings"] == {"gpu-1": {"strategy": "TimeSlicing", "timesliceInterval": "Long"}}


def test_mps_from_a_class_config_exports_the_pipe_directory(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    mps = {
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 25}},
    }
    with_configs(node, claim, opaque(mps, source="FromClass"))

    node.preparer(feature_gates={"MPSSupport": True}).prepare([claim])

    env = device_env(node, claim)["gpu-0"]
    assert "FAKEPLUGIN_GPU_0_SHARING_STRATEGY=MPS" in env
    assert "FAKEPLUGIN_GPU_0_MPS_ACTIVE_THREAD_PERCENTAGE=25" in env
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in env


def test_an_unknown_field_fails_the_claim_with_the_real_error_chain(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    with_configs(node, claim, opaque({**timeslicing("Long"), "x": 1}))

    results = node.preparer(feature_gates=TS_ON).prepare([claim])

    assert results[claim.uid].error == (
        f"error preparing devices for claim ns/claim-1:{claim.uid}: prepare devices failed: "
        "error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "x"'
    )
    assert results[claim.uid].devices == ()
    assert not node.spec_path(claim).exists()
    # As upstream, the configs are read after PrepareStarted is recorded; unprepare clears such an entry.
    assert node.checkpoint().claims[claim.uid].state is ClaimState.PREPARE_STARTED
    assert node.preparer().unprepare([claim]) == {claim.uid: ""}
    assert node.checkpoint().claims == {}


def test_timeslicing_needs_its_feature_gate_off_by_default(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    with_configs(node, claim, opaque(timeslicing("Long")))

    results = node.preparer(release=V0_4_1).prepare([claim])

    assert results[claim.uid].error == (
        f"error preparing devices for claim ns/claim-1:{claim.uid}: prepare devices failed: "
        'error validating GPU config: "TimeSlicing" is selected as the GPU sharing strategy, '
        'but the "TimeSlicingSettings" feature gate is not enabled'
    )


def test_release_25_12_says_it_tersely_and_time_slices_unconfigured_gpus_once_gated_on(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    with_configs(node, claim, opaque(timeslicing("Long")))
    assert node.preparer(release=V25_12).prepare([claim])[claim.uid].error == (
        f"error preparing devices for claim ns/claim-1:{claim.uid}: prepare devices failed: "
        "error validating GPU config: unknown GPU sharing strategy: TimeSlicing"
    )

    plain = node.add(ref(2), result("gpu-2"))
    assert node.preparer(release=V25_12, feature_gates=TS_ON).prepare([plain])[plain.uid].error == ""
    env = device_env(node, plain)["gpu-2"]
    assert "FAKEPLUGIN_GPU_2_SHARING_STRATEGY=TimeSlicing" in env
    assert "FAKEPLUGIN_GPU_2_TIMESLICE_INTERVAL=Default" in env


def test_a_vanished_spec_is_rewritten_with_the_checkpointed_settings(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-3"))
    with_configs(node, claim, opaque(timeslicing("Short")))
    first = node.preparer(feature_gates=TS_ON).prepare([claim])
    content = node.spec_path(claim).read_text()
    node.spec_path(claim).unlink()

    # A restarted plugin, now without the gate: the prepared claim keeps what was applied, as upstream.
    assert node.preparer().prepare([claim]) == first
    assert node.spec_path(claim).read_text() == content
    assert "FAKEPLUGIN_GPU_3_TIMESLICE_INTERVAL=Short" in device_env(node, claim)["gpu-3"]


def test_malformed_settings_in_the_checkpoint_are_corruption_naming_the_field(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    with_configs(node, claim, opaque(timeslicing("Long")))
    node.preparer(feature_gates=TS_ON).prepare([claim])
    path = node.plugin_dir / cp.FILE_NAME
    document = json.loads(path.read_text())
    document["preparedClaims"][claim.uid]["settings"]["gpu-0"]["timesliceInterval"] = 3
    payload = {k: v for k, v in document.items() if k != "checksum"}
    path.write_text(json.dumps({**payload, "checksum": cp._checksum(payload)}))

    with pytest.raises(
        cp.CheckpointError,
        match=rf"preparedClaims\.{claim.uid}\.settings\.gpu-0\.timesliceInterval: expected str, got 3",
    ):
        node.checkpoint()


def test_the_nvidia_smi_data_shows_mps_gpus_in_exclusive_process_compute_mode(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1", "mps"), result("gpu-2", "ts"), result("gpu-3", "plain"))
    mps = {"kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
    with_configs(node, claim, opaque(mps, "mps"), opaque(timeslicing("Medium"), "ts"))
    gates = {"MPSSupport": True, "TimeSlicingSettings": True}

    assert node.preparer(feature_gates=gates).prepare([claim])[claim.uid].error == ""

    files = [node.plugin_dir / "smi" / f"{claim.uid}-{name}.env" for name in ("gpu-1", "gpu-2", "gpu-3")]

    def modes() -> list[str]:
        return [
            line for f in files for line in f.read_text().splitlines() if line.startswith("compute_mode=")
        ]

    assert modes() == ["compute_mode=Exclusive_Process", "compute_mode=Default", "compute_mode=Default"]
    # Rewritten from the checkpointed settings when it vanished, by a plugin now without the gates.
    files[0].unlink()
    node.preparer().prepare([claim])
    assert modes() == ["compute_mode=Exclusive_Process", "compute_mode=Default", "compute_mode=Default"]
