"""CDI specs of GPU claims (drivers.gpu.prepare.cdispec): content, cdiVersion rules, validation, files."""

from __future__ import annotations

import copy
import random
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec
from fakeplugin.model import DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.factories import H200, numbered

UID_LETTER = "dab5ab50-1f2e-4c3d-9a8b-7c6d5e4f3a2b"  # starts with a letter: no 0.5.0 feature
UID_DIGIT = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"  # starts with a digit: device names need 0.5.0


def gpu(minor: int) -> GpuDevice:
    return numbered(
        H200,
        minor,
        uuid=f"GPU-{minor:08x}-0402-2785-a79b-f013317dbdce",
        pci_bus_id=f"0000:{minor + 3:02x}:00.0",
        pcie_root=None,
        addressing_mode="HMM",
    )


def test_one_gpu_spec() -> None:
    spec = cdispec.claim_spec(UID_LETTER, [gpu(0)], driver_name=DRIVER)
    assert spec == {
        "cdiVersion": "0.3.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {
                "name": f"{UID_LETTER}-gpu-0",
                "containerEdits": {
                    "env": [
                        "FAKEPLUGIN_GPU_0_UUID=GPU-00000000-0402-2785-a79b-f013317dbdce",
                        "FAKEPLUGIN_GPU_0_DEVICE=gpu-0",
                    ]
                },
            }
        ],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void", f"FAKEPLUGIN_CLAIM_UID={UID_LETTER}"]},
    }
    assert cdi.validate_spec(spec) == []


def test_two_gpu_spec_with_device_nodes() -> None:
    spec = cdispec.claim_spec(UID_DIGIT, [gpu(3), gpu(1)], driver_name=DRIVER, device_nodes=True)
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [
            {
                "name": f"{UID_DIGIT}-gpu-3",
                "containerEdits": {
                    "env": [
                        "FAKEPLUGIN_GPU_3_UUID=GPU-00000003-0402-2785-a79b-f013317dbdce",
                        "FAKEPLUGIN_GPU_3_DEVICE=gpu-3",
                    ],
                    "deviceNodes": [{"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3}],
                },
            },
            {
                "name": f"{UID_DIGIT}-gpu-1",
                "containerEdits": {
                    "env": [
                        "FAKEPLUGIN_GPU_1_UUID=GPU-00000001-0402-2785-a79b-f013317dbdce",
                        "FAKEPLUGIN_GPU_1_DEVICE=gpu-1",
                    ],
                    "deviceNodes": [{"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1}],
                },
            },
        ],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void", f"FAKEPLUGIN_CLAIM_UID={UID_DIGIT}"],
            "deviceNodes": [
                {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255},
                {"path": "/dev/nvidia-uvm", "type": "c", "major": 238, "minor": 0},
                {"path": "/dev/nvidia-uvm-tools", "type": "c", "major": 238, "minor": 1},
            ],
        },
    }
    assert cdi.validate_spec(spec) == []


def test_cdi_device_id_and_spec_path() -> None:
    assert (
        cdi.cdi_device_id(UID_LETTER, "gpu-0", driver_name=DRIVER)
        == f"k8s.gpu.nvidia.com/claim={UID_LETTER}-gpu-0"
    )
    assert cdi.spec_path(Path("/var/run/cdi"), UID_LETTER, driver_name=DRIVER) == Path(
        f"/var/run/cdi/k8s.gpu.nvidia.com-claim_{UID_LETTER}.yaml"
    )


@pytest.mark.parametrize("uid", ["", "../x", "a/b", "x\0y"])
def test_spec_path_refuses_uids_that_could_leave_the_directory(uid: str) -> None:
    with pytest.raises(ValueError, match="cannot be part of a CDI spec file name"):
        cdi.spec_path(Path("/var/run/cdi"), uid, driver_name=DRIVER)


def test_claim_spec_needs_a_device() -> None:
    with pytest.raises(ValueError, match="at least one device"):
        cdispec.claim_spec(UID_LETTER, [], driver_name=DRIVER)


# ---- cdiVersion ------------------------------------------------------------------------------------------


def base_spec() -> dict[str, Any]:
    return {
        "cdiVersion": "0.3.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "dev0", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": {},
    }


def with_change(path: str, value: Any) -> dict[str, Any]:
    spec = base_spec()
    target: Any = spec
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[last] = value
    return spec


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (base_spec(), "0.3.0"),
        (with_change("devices.0.name", "0dev"), "0.5.0"),
        (with_change("containerEdits.deviceNodes", [{"path": "/dev/x", "hostPath": "/dev/y"}]), "0.5.0"),
        (
            with_change(
                "devices.0.containerEdits.mounts", [{"hostPath": "a", "containerPath": "/b", "type": "x"}]
            ),
            "0.4.0",
        ),
        (with_change("annotations", {"a": "b"}), "0.6.0"),
        (with_change("devices.0.annotations", {"a": "b"}), "0.6.0"),
        (with_change("kind", "example.com/gpu.v2"), "0.6.0"),
        (with_change("containerEdits.additionalGids", [5]), "0.7.0"),
        (with_change("devices.0.containerEdits.intelRdt", {"closID": "c"}), "0.7.0"),
        (with_change("containerEdits.netDevices", [{"hostInterfaceName": "eth1", "name": "net1"}]), "1.1.0"),
    ],
)
def test_required_version(spec: dict[str, Any], version: str) -> None:
    assert cdi.required_version(spec) == version


def test_required_version_takes_the_newest_feature_used() -> None:
    spec = with_change("devices.0.name", "0dev")  # 0.5.0
    spec["annotations"] = {"a": "b"}  # 0.6.0
    assert cdi.required_version(spec) == "0.6.0"


# ---- validation ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("cdiVersion", "0.9.9", "cdiVersion: '0.9.9' is not a released CDI spec version"),
        (
            "devices.0.name",
            "0dev",
            "cdiVersion: 0.3.0 is too old for the content, which needs at least 0.5.0",
        ),
        ("kind", "example.com", "kind: 'example.com' is not of the form <vendor>/<class>"),
        ("kind", "1example.com/gpu", "kind: vendor '1example.com' must start with a letter"),
        ("kind", "example.com/g~pu", "kind: class 'g~pu' must start with a letter"),
        ("devices.0.name", "dev/0", "devices[0].name: 'dev/0' must start and end with a letter or digit"),
        (
            "devices.0.containerEdits",
            {},
            "devices[0].containerEdits: a device needs non-empty container edits",
        ),
        (
            "devices.0.containerEdits.env",
            ["NOVALUE"],
            "devices[0].containerEdits.env[0]: 'NOVALUE' is not of the",
        ),
        ("devices.0.containerEdits.env", ["=x"], "devices[0].containerEdits.env[0]: '=x' is not of the form"),
        (
            "containerEdits.deviceNodes",
            [{"path": "dev/x"}],
            "containerEdits.deviceNodes[0].path: 'dev/x' must be an",
        ),
        (
            "containerEdits.deviceNodes",
            [{"path": "/dev/x", "type": "z"}],
            "containerEdits.deviceNodes[0].type: 'z' is not one of",
        ),
        (
            "containerEdits.deviceNodes",
            [{"path": "/dev/x", "major": -1}],
            "containerEdits.deviceNodes[0].major: -1 must be a non",
        ),
        (
            "containerEdits.deviceNodes",
            [{"path": "/x", "permissions": "rx"}],
            "containerEdits.deviceNodes[0].permissions: 'rx'",
        ),
        (
            "containerEdits.mounts",
            [{"hostPath": "/a", "containerPath": "b"}],
            "containerEdits.mounts[0].containerPath: 'b' must",
        ),
        (
            "containerEdits.hooks",
            [{"hookName": "boot", "path": "/h"}],
            "containerEdits.hooks[0].hookName: 'boot' is not an OCI",
        ),
        ("containerEdits.envs", ["A=1"], "containerEdits.envs: unknown field"),
        ("devices", [], "devices: a spec needs at least one device"),
    ],
)
def test_validate_spec_reports_each_problem_with_its_field_path(path: str, value: Any, problem: str) -> None:
    problems = cdi.validate_spec(with_change(path, value))
    assert any(p.startswith(problem) for p in problems), problems


def test_validate_spec_reports_duplicate_device_names() -> None:
    spec = base_spec()
    spec["devices"].append(copy.deepcopy(spec["devices"][0]))
    assert cdi.validate_spec(spec) == ["devices[1].name: duplicate device name 'dev0'"]


# ---- files -----------------------------------------------------------------------------------------------


def test_write_spec_writes_yaml_0644_atomically(tmp_path: Path) -> None:
    spec = cdispec.claim_spec(UID_DIGIT, [gpu(0), gpu(1)], driver_name=DRIVER)
    path = cdi.spec_path(tmp_path, UID_DIGIT, driver_name=DRIVER)
    cdi.write_spec(path, spec)
    assert yaml.safe_load(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind
    assert path.read_text().startswith("cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\n")


def test_write_spec_refuses_an_invalid_spec(tmp_path: Path) -> None:
    spec = cdispec.claim_spec(UID_DIGIT, [gpu(0)], driver_name=DRIVER)
    spec["cdiVersion"] = "0.3.0"
    path = tmp_path / "x.yaml"
    with pytest.raises(
        ValueError, match=r"refusing to write invalid CDI spec .*x\.yaml: cdiVersion: 0\.3\.0 is too old"
    ):
        cdi.write_spec(path, spec)
    assert list(tmp_path.iterdir()) == []


def test_remove_spec(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("x")
    assert cdi.remove_spec(path) is True
    assert not path.exists()
    assert cdi.remove_spec(path) is False


def test_a_claims_spec_text_is_its_specs_yaml_for_any_uid_and_shape() -> None:
    """claim_spec_text makes the text once per shape for a stand-in UID and puts the claim's in its place."""
    rng = random.Random(7)
    mps = DeviceSettings(strategy="MPS", mps_active_thread_percentage=50)
    shapes: list[dict[str, Any]] = [
        dict(devices=[gpu(0)], driver_name=DRIVER),
        dict(devices=[gpu(0), gpu(1)], driver_name=DRIVER, device_nodes=True, plugin_dir=Path("/var/p")),
        dict(devices=[gpu(1)], driver_name=DRIVER, plugin_dir=Path("/p"), settings={"gpu-1": mps}),
    ]
    uids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(200)]
    uids += [
        UID_LETTER,
        UID_DIGIT,
        "12345678-0000-4000-8000-0000000000e1",
        "1e100000-0000-4000-8000-000000000000",
    ]
    for uid in uids:
        for shape in shapes:
            kw = dict(shape)
            devices = kw.pop("devices")
            expected = yaml.dump(
                cdispec.claim_spec(uid, devices, **kw), Dumper=yaml.SafeDumper, sort_keys=False
            )
            assert cdispec.claim_spec_text(uid, devices, **kw) == expected
    # Not a UUID (the kubelet never sends one): dumped as it is, quoted where YAML needs it.
    assert "FAKEPLUGIN_CLAIM_UID=12345\n" in cdispec.claim_spec_text("12345", [gpu(0)], driver_name=DRIVER)
