"""The CDI spec of a claim whose requests go to different containers (NVIDIA's quickstart gpu-test4 and
gpu-test5 shapes): the kubelet injects only a container's own requests' devices, so every edit that names a
GPU or its sharing settings sits on that GPU's device; the spec level holds what the real driver puts there.

Golden files (tests/golden/cdi-*.yaml) hold the whole specs; after an intended change regenerate them and
review `git diff tests/golden`: `UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_cdi_per_request.py`.
tests/data/cdi-earlier/ holds the same claims' specs as the fakeplugin before per-device env wrote them
(claim-level `NVIDIA_VISIBLE_DEVICES=<uuids>`, `FAKEPLUGIN_CLAIM_DEVICES`, the nvidia-smi script mounted
without its awk program); they must upgrade exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, smi
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare.claimfiles import ClaimFiles
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import ClaimState, DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.golden import check_golden
from tests.harness.prepare import BOOT, Node, ref, result

UID = "5a7e9c1d-2b4f-4a6e-8c0d-1e3f5a7b9c2d"
PLUGIN_DIR = Path("/var/lib/kubelet/plugins/gpu.nvidia.com")
EARLIER = Path(__file__).resolve().parent / "data" / "cdi-earlier"

# gpu-test4: one A100-40GB in the quickstart's half-balanced layout; one request per MIG device.
MIG_NODE = {
    "name": "mig-node",
    "gpus": [
        {
            "profile": "a100-40gb",
            "mig": [{"profile": "1g.5gb", "count": 2}, {"profile": "2g.10gb"}, {"profile": "3g.20gb"}],
        }
    ],
}
# gpu-test5: two T10, one time-sliced (ts-gpu), one shared through MPS (mps-gpu).
SHARED_NODE = {"name": "t10-node", "gpus": [{"profile": "t10", "count": 2}]}
SHARING = {
    "gpu-0": DeviceSettings("TimeSlicing", timeslice_interval="Long"),
    "gpu-1": DeviceSettings(
        "MPS",
        mps_control_daemon=f"mps-control-daemon-{UID}-gpu-1",
        mps_active_thread_percentage=50,
        mps_pinned_device_memory_limit="10240M",
    ),
}


def devices_of(node: dict[str, Any]) -> list[GpuDevice]:
    inventory = parse_inventory(
        {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [node]}, source="test"
    )
    return node_devices(inventory, node["name"], {})


def spec_of(case: str) -> dict[str, Any]:
    """The current spec of the case's claim, with device nodes and the fake nvidia-smi mounted."""
    node, settings = (MIG_NODE, {}) if case == "gpu-test4" else (SHARED_NODE, SHARING)
    return cdispec.claim_spec(
        UID,
        devices_of(node),
        driver_name=DRIVER,
        device_nodes=True,
        plugin_dir=PLUGIN_DIR,
        settings=settings,
    )


def env_of(spec: dict[str, Any], *device_names: str) -> dict[str, str]:
    """The env a container gets when the kubelet injects these devices of the spec (CDI order: spec-level
    edits, then each device's; a later value of a key replaces an earlier one)."""
    by_name = {d["name"].removeprefix(f"{UID}-"): d for d in spec["devices"]}
    entries = spec["containerEdits"]["env"] + [
        e for n in device_names for e in by_name[n]["containerEdits"]["env"]
    ]
    return dict(entry.split("=", 1) for entry in entries)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


@pytest.mark.parametrize("case", ["gpu-test4", "gpu-test5"])
def test_golden_spec(case: str) -> None:
    spec = spec_of(case)
    assert cdi.validate_spec(spec) == []
    check_golden(f"cdi-{case}.yaml", [spec])


@pytest.mark.parametrize("case", ["gpu-test4", "gpu-test5"])
def test_the_spec_level_has_only_what_every_container_of_the_claim_shares(case: str) -> None:
    edits = spec_of(case)["containerEdits"]
    assert edits["env"] == ["NVIDIA_VISIBLE_DEVICES=void", f"FAKEPLUGIN_CLAIM_UID={UID}"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert [m["containerPath"] for m in edits["mounts"]] == ["/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi.awk"]


def test_each_mig_container_gets_only_its_own_mig_device() -> None:
    spec = spec_of("gpu-test4")
    migs = {d.name: d for d in devices_of(MIG_NODE)}
    assert sorted(migs) == [
        "gpu-0-mig-1g5gb-19-2",
        "gpu-0-mig-1g5gb-19-3",
        "gpu-0-mig-2g10gb-14-0",
        "gpu-0-mig-3g20gb-9-4",
    ]
    for name, mig in migs.items():
        prefix = f"FAKEPLUGIN_GPU_0_MIG_{mig.mig.gi_profile_id}_{mig.mig.start}_"
        assert env_of(spec, name) == {
            "NVIDIA_VISIBLE_DEVICES": "void",
            "FAKEPLUGIN_CLAIM_UID": UID,
            f"{prefix}UUID": mig.uuid,
            f"{prefix}DEVICE": name,
        }
        (device,) = [d for d in spec["devices"] if d["name"] == f"{UID}-{name}"]
        assert [m["containerPath"] for m in device["containerEdits"]["mounts"]] == [
            f"/run/fakeplugin/gpus/{name}.env"  # the only data file: nvidia-smi shows this MIG device only
        ]


def test_the_time_sliced_and_the_mps_container_each_see_their_own_gpu_and_sharing() -> None:
    spec = spec_of("gpu-test5")
    t10s = {d.name: d for d in devices_of(SHARED_NODE)}
    assert env_of(spec, "gpu-0") == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FAKEPLUGIN_CLAIM_UID": UID,
        "FAKEPLUGIN_GPU_0_UUID": t10s["gpu-0"].uuid,
        "FAKEPLUGIN_GPU_0_DEVICE": "gpu-0",
        "FAKEPLUGIN_GPU_0_SHARING_STRATEGY": "TimeSlicing",
        "FAKEPLUGIN_GPU_0_TIMESLICE_INTERVAL": "Long",
    }
    assert env_of(spec, "gpu-1") == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FAKEPLUGIN_CLAIM_UID": UID,
        "FAKEPLUGIN_GPU_1_UUID": t10s["gpu-1"].uuid,
        "FAKEPLUGIN_GPU_1_DEVICE": "gpu-1",
        "FAKEPLUGIN_GPU_1_SHARING_STRATEGY": "MPS",
        "FAKEPLUGIN_GPU_1_MPS_CONTROL_DAEMON": f"mps-control-daemon-{UID}-gpu-1",
        "FAKEPLUGIN_GPU_1_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "FAKEPLUGIN_GPU_1_MPS_PINNED_DEVICE_MEMORY_LIMIT": "10240M",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
    }


# ---- specs an earlier version wrote ----------------------------------------------------------------------


@pytest.mark.parametrize("case", ["gpu-test4", "gpu-test5"])
def test_an_earlier_spec_upgrades_to_exactly_the_current_one(case: str) -> None:
    earlier = yaml.safe_load((EARLIER / f"{case}.yaml").read_text())
    assert "FAKEPLUGIN_CLAIM_DEVICES" in json.dumps(earlier)  # the data is the old shape
    # The data files stay where the earlier version wrote them (a directory per claim): only containers
    # created afterwards see the upgraded spec, and the files are removed with the claim.
    current_with_earlier_data = json.loads(json.dumps(spec_of(case)).replace(f"/smi/{UID}-", f"/smi/{UID}/"))
    assert cdispec.upgrade_spec(earlier, UID) == current_with_earlier_data
    assert cdispec.upgrade_spec(spec_of(case), UID) is None  # the current shape stays as it is


def without_program_mount(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` as the version before the awk program wrote it: the script mounted alone."""
    edits = spec["containerEdits"]
    mounts = [m for m in edits["mounts"] if m["containerPath"] != smi.PROGRAM_CONTAINER_PATH]
    assert len(mounts) == len(edits["mounts"]) - 1
    return {**spec, "containerEdits": {**edits, "mounts": mounts}}


@pytest.mark.parametrize("case", ["gpu-test4", "gpu-test5"])
def test_a_spec_that_mounts_the_script_alone_gains_its_program_beside_it(case: str) -> None:
    earlier = without_program_mount(spec_of(case))
    assert cdispec.upgrade_spec(earlier, UID) == spec_of(case)
    script, program = spec_of(case)["containerEdits"]["mounts"]
    assert Path(program["hostPath"]).parent == Path(script["hostPath"]).parent
    assert program["options"] == script["options"]


def test_the_program_mount_keeps_the_script_mounts_options_and_place() -> None:
    script = {"hostPath": "/p/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi", "options": ["ro"]}
    other = {"hostPath": "/x", "containerPath": "/y"}
    assert smi.with_program_mount([other, script, other]) == [
        other,
        script,
        {"hostPath": "/p/bin/nvidia-smi.awk", "containerPath": "/usr/bin/nvidia-smi.awk", "options": ["ro"]},
        other,
    ]
    assert smi.with_program_mount([other]) is None  # no script of ours: nothing to add
    assert smi.with_program_mount(None) is None
    no_smi = cdispec.claim_spec(UID, devices_of(SHARED_NODE), driver_name=DRIVER)  # no plugin_dir: no mounts
    assert cdispec.upgrade_spec(no_smi, UID) is None


def test_upgrading_a_spec_of_unknown_shape_leaves_the_verdict_to_validation() -> None:
    odd = {"cdiVersion": "0.3.0", "kind": "k8s.gpu.nvidia.com/claim", "containerEdits": "x",
           "devices": [{"name": "a", "containerEdits": [1]}, "b"]}  # fmt: skip
    upgraded = cdispec.upgrade_spec(odd, UID)
    assert upgraded is not None and upgraded["containerEdits"] == {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}
    assert "devices[0].containerEdits: a device needs non-empty container edits" in cdi.validate_spec(
        upgraded
    )
    assert odd["containerEdits"] == "x"  # the input is left as it was


def test_a_restarted_plugin_upgrades_the_specs_of_prepared_claims_only(node: Node) -> None:
    done, started = ref(1), ref(2)
    for claim in (done, started):
        node.add(claim, result("gpu-0" if claim is done else "gpu-1"))
    node.preparer().prepare([done])
    entry = node.checkpoint().claims[done.uid]
    earlier = {"cdiVersion": "0.5.0", "kind": "k8s.gpu.nvidia.com/claim", "devices": [
        {"name": f"{done.uid}-gpu-0", "containerEdits": {"env": ["FAKEPLUGIN_GPU_0_UUID=GPU-x"]}}],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-x", f"FAKEPLUGIN_CLAIM_UID={done.uid}",
                                   "FAKEPLUGIN_CLAIM_DEVICES=gpu-0"]}}  # fmt: skip
    node.spec_path(done).write_text(yaml.safe_dump(earlier))
    # A PrepareStarted claim's spec is rolled back by its next Prepare, never upgraded.
    half = {**earlier, "devices": [{**earlier["devices"][0], "name": f"{started.uid}-gpu-1"}]}
    node.spec_path(started).write_text(yaml.safe_dump(half))
    checkpoint = node.checkpoint().with_claim(
        started.uid, cp.ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "claim-2", entry.devices)
    )
    cp.CheckpointFile(node.plugin_dir / cp.FILE_NAME, boot_id=BOOT).save(checkpoint)

    node.preparer()

    upgraded = yaml.safe_load(node.spec_path(done).read_text())
    assert upgraded["containerEdits"]["env"] == [
        "NVIDIA_VISIBLE_DEVICES=void",
        f"FAKEPLUGIN_CLAIM_UID={done.uid}",
    ]
    assert upgraded["devices"][0]["containerEdits"]["env"] == [
        "FAKEPLUGIN_GPU_0_UUID=GPU-x",
        "FAKEPLUGIN_GPU_0_DEVICE=gpu-0",
    ]
    assert yaml.safe_load(node.spec_path(started).read_text()) == half
    assert node.checkpoint().claims[done.uid] == entry  # the checkpoint format is unchanged


def test_a_spec_that_cannot_be_upgraded_is_kept_and_start_goes_on(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    node.preparer().prepare([claim])
    node.spec_path(claim).write_text("devices: [unclosed\n")
    node.preparer().prepare([claim])  # starts, answers from the checkpoint
    assert node.spec_path(claim).read_text() == "devices: [unclosed\n"


def test_a_restarted_plugin_installs_the_script_after_the_specs_mount_its_program(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    node.preparer().prepare([claim])
    current = node.spec_path(claim).read_text()
    node.spec_path(claim).write_text(yaml.safe_dump(without_program_mount(yaml.safe_load(current))))
    earlier_script = "#!/bin/sh\n# an earlier, self-contained script\n"
    smi.script_path(node.plugin_dir).write_text(earlier_script)
    smi.program_path(node.plugin_dir).unlink()
    seen: list[tuple[str, str]] = []
    upgrade_specs = ClaimFiles.upgrade_specs

    def upgrade_specs_seeing_the_files(self: ClaimFiles, uids: Any) -> None:
        seen.append(
            (smi.program_path(node.plugin_dir).read_text(), smi.script_path(node.plugin_dir).read_text())
        )
        upgrade_specs(self, uids)

    monkeypatch.setattr(ClaimFiles, "upgrade_specs", upgrade_specs_seeing_the_files)
    node.preparer()

    # While specs mounted the script alone, the earlier script stayed; the program was there for them.
    assert seen == [(smi.program_text(), earlier_script)]
    assert yaml.safe_load(node.spec_path(claim).read_text()) == yaml.safe_load(current)
    assert smi.script_path(node.plugin_dir).read_text() == smi.script_text()
