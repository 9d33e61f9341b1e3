"""Emulated NVIDIA driver releases (fakeplugin.releases): selection, validation, and what differs.

The differences and their sources are in docs/driver-releases.md; opaque-config differences are tested in
test_opaqueconfig.py and test_prepare_opaqueconfig.py, the whole render per release in test_golden.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import featuregates, releases
from fakeplugin.cluster import components
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.drivers.gpu.publish.node import EnumerationError, node_slices
from fakeplugin.drivers.gpu.publish.slices import resource_slices
from fakeplugin.inventory import InventoryError, load_inventory, parse_inventory
from fakeplugin.render import render_documents
from tests.harness.cli import render_cli
from tests.harness.paths import SEED_LAB
from tests.harness.prepare import gpu

KNOWN = "25.12 (v25.12.0), 0.4.1 (v0.4.1), 0.5.0-dev (main 95932046), 0.5.0 (v0.5.0)"
V25_12, V0_4_1 = releases.get("25.12"), releases.get("0.4.1")


def inventory(**top: Any) -> dict[str, Any]:
    return {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        **top,
        "nodes": [{"name": "n", "gpus": [{"profile": "t4"}]}],
    }


def problems(data: Any) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        parse_inventory(data, source="inv.yaml")
    return exc.value.problems


def test_the_default_is_the_newest_release_the_reference_lab_pins_its_own_and_tags_are_accepted() -> None:
    assert releases.get(None) is releases.get(releases.NEWEST_RELEASE) is releases.get("0.5.0")
    assert parse_inventory(inventory(), source="t").driver_release == "0.5.0"
    assert load_inventory(SEED_LAB).driver_release == "25.12"
    for name in ("0.4.1", "v0.4.1"):
        assert parse_inventory(inventory(driverRelease=name), source="t").driver_release == "0.4.1"
    assert releases.get("v25.12.0") is releases.get("25.12.0") is V25_12
    assert releases.known() == KNOWN


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("0.6.0", f'unknown NVIDIA driver release "0.6.0"; known: {KNOWN}'),
        ("", f'unknown NVIDIA driver release ""; known: {KNOWN}'),
        (25.12, f'must be a string: quote it, driverRelease: "25.12"; known: {KNOWN}'),
        (["0.4.1"], f"must be a string, one of: {KNOWN}"),
    ],
)
def test_a_bad_driver_release_names_the_file_and_field_and_lists_the_known_ones(
    value: Any, problem: str
) -> None:
    assert problems(inventory(driverRelease=value)) == [f"inv.yaml: driverRelease: {problem}"]


def test_0_5_0_is_the_newest_and_publishes_as_0_5_0_dev_but_for_its_checkpoint() -> None:
    """v0.5.0 is selectable by name and tag; what it publishes and accepts is 0.5.0-dev's (main 95932046);
    only the checkpoint's empty mpsControlDaemonID (PR #1326) tells them apart (test_checkpoint_releases)."""
    v0_5_0, dev = releases.get("0.5.0"), releases.get("0.5.0-dev")
    assert releases.NEWEST_RELEASE == "0.5.0" and releases.get(None) is v0_5_0
    assert releases.get("v0.5.0") is releases.get("0.5.0") is v0_5_0
    assert parse_inventory(inventory(driverRelease="v0.5.0"), source="t").driver_release == "0.5.0"
    assert v0_5_0.checkpoint_mps_id_omitempty is False and dev.checkpoint_mps_id_omitempty is True
    differ = {"name", "tag", "commit", "checkpoint_mps_id_omitempty"}
    same = {f for f in v0_5_0.__dataclass_fields__ if f not in differ}
    assert {f: getattr(v0_5_0, f) for f in same} == {f: getattr(dev, f) for f in same}


def test_feature_gates_follow_the_release() -> None:
    assert "DeviceMetadata" not in featuregates.parse("", V25_12)
    assert featuregates.parse("PassthroughSupport=true,DeviceMetadata=true", V0_4_1)["DeviceMetadata"] is True
    with pytest.raises(ValueError) as exc:
        featuregates.parse("DeviceMetadata=true", V25_12)
    assert str(exc.value) == (
        "--feature-gates: unknown feature gate 'DeviceMetadata' in NVIDIA driver release 25.12; known: "
        "ComputeDomainCliques, CrashOnNVLinkFabricErrors, DynamicMIG, IMEXDaemonsWithDNSNames, MPSSupport, "
        "NVMLDeviceHealthCheck, PassthroughSupport, TimeSlicingSettings "
        "(DeviceMetadata is a gate of releases 0.4.1, 0.5.0-dev, 0.5.0)"
    )
    # Same defaults wherever both releases have the gate (pkg/featuregates/featuregates.go at both tags).
    assert {g: d for g, d in V0_4_1.feature_gates.items() if g in V25_12.feature_gates} == dict(
        V25_12.feature_gates
    )


def test_nvidias_and_kubernetes_gate_lists_share_one_syntax_each_with_its_own_checks() -> None:
    assert featuregates.settings(" A=true,, B = FALSE ,C,D=yes,=true") == [
        ("A=true", "A", True),
        ("B = FALSE", "B", False),
        ("C", "C", None),
        ("D=yes", "D", None),
        ("=true", "", True),
    ]
    assert featuregates.parse(" TimeSlicingSettings = TRUE ,", V25_12)["TimeSlicingSettings"] is True
    assert components.parse_feature_gates(" DRADeviceTaints = FALSE ,", {}) == {"DRADeviceTaints": False}
    with pytest.raises(ValueError) as nvidia:
        featuregates.parse("MPSSupport=yes", V25_12)
    assert str(nvidia.value) == (
        "--feature-gates: 'MPSSupport=yes': expected MPSSupport=true or MPSSupport=false"
    )
    with pytest.raises(ValueError) as kubernetes:
        components.parse_feature_gates("=true", {})
    assert str(kubernetes.value) == "--feature-gates: '=true': expected Name=true or Name=false"


@pytest.mark.parametrize(
    ("text", "release", "problem"),
    [
        (
            "IMEXDaemonsWithDNSNames=false",
            V25_12,
            "ComputeDomainCliques requires IMEXDaemonsWithDNSNames to also",
        ),
        (
            "DynamicMIG=true,MPSSupport=true",
            V25_12,
            "DynamicMIG is currently mutually exclusive with MPSSupport",
        ),
        (
            "PassthroughSupport=true,NVMLDeviceHealthCheck=true",
            V0_4_1,
            "PassthroughSupport is currently mutually",
        ),
        ("DeviceMetadata=true", V0_4_1, "DeviceMetadata requires PassthroughSupport to also be enabled"),
    ],
)
def test_gate_combinations_the_release_refuses_at_start(
    text: str, release: releases.DriverRelease, problem: str
) -> None:
    with pytest.raises(ValueError) as exc:
        featuregates.parse(text, release)
    assert str(exc.value).startswith(f"--feature-gates: feature gate {problem}")


def test_a_gate_combination_only_0_4_1_refuses() -> None:
    text = "PassthroughSupport=true,NVMLDeviceHealthCheck=true"
    assert featuregates.parse(text, V25_12)["NVMLDeviceHealthCheck"] is True
    with pytest.raises(ValueError):
        featuregates.parse(text, V0_4_1)


def test_slice_names_follow_the_releases_k8s_libraries() -> None:
    devices = [gpu(0)]
    (old,) = resource_slices(
        devices, driver="gpu.nvidia.com", node_name="node-a", node_uid="u", release=V25_12
    )
    assert old["metadata"]["generateName"] == "node-a-gpu.nvidia.com-"
    (default,) = resource_slices(devices, driver="gpu.nvidia.com", node_name="node-a", node_uid="u")
    assert default["metadata"]["generateName"] == "00000-gpu.nvidia.com-node-a-"
    (new,) = resource_slices(
        devices, driver="gpu.nvidia.com", node_name="node-a", node_uid="u", release=V0_4_1
    )
    assert new["metadata"]["generateName"] == "00000-gpu.nvidia.com-node-a-"
    assert {**new, "metadata": {**new["metadata"], "generateName": ""}} == {
        **old,
        "metadata": {**old["metadata"], "generateName": ""},
    }


def test_a_pool_of_many_slices_numbers_them_in_hex_with_at_least_five_digits() -> None:
    devices = [{"name": f"gpu-{i}"} for i in range(129 * 17)]  # 18 slices of at most 128
    slices = resource_slices(devices, driver="d.example", node_name="n", node_uid="u", release=V0_4_1)
    names = [s["metadata"]["generateName"] for s in slices]
    assert names[:2] == ["00000-d.example-n-", "00001-d.example-n-"]
    assert names[-1] == "00011-d.example-n-" and len(names) == 18


def test_device_classes_and_attributes_are_the_same_in_both_releases() -> None:
    assert device_classes(release=V0_4_1) == device_classes(release=V25_12)
    inv = load_inventory(SEED_LAB)
    for node in ("capi-dralabs-md-gput10-gzl84-f2m2d", "capi-dralabs-md-gpua5000-jw4mx-d64jz"):
        (old,) = node_slices(inv, node, node_uid="u", driver="gpu.nvidia.com")
        (new,) = node_slices(inv, node, node_uid="u", driver="gpu.nvidia.com", release=V0_4_1)
        assert new["spec"] == old["spec"]


def test_node_slices_default_to_the_inventorys_release() -> None:
    inv = parse_inventory(inventory(driverRelease="0.4.1"), source="t")
    (rs,) = node_slices(inv, "n", node_uid="u", driver="gpu.nvidia.com")
    assert rs["metadata"]["generateName"] == "00000-gpu.nvidia.com-n-"
    (rs,) = node_slices(inv, "n", node_uid="u", driver="gpu.nvidia.com", release=V25_12)
    assert rs["metadata"]["generateName"] == "n-gpu.nvidia.com-"
    assert render_documents(inv)[-1]["metadata"]["generateName"] == "00000-gpu.nvidia.com-n-"


def test_render_driver_release_overrides_the_inventory() -> None:
    result = render_cli(
        "--driver-release", "0.4.1", "--feature-gates", "PassthroughSupport=true,DeviceMetadata=true"
    )
    assert result.returncode == 0, result.stderr
    slices = [d for d in yaml.safe_load_all(result.stdout) if d["kind"] == "ResourceSlice"]
    assert [s["metadata"]["generateName"] for s in slices] == [
        "00000-gpu.nvidia.com-capi-dralabs-md-gput10-gzl84-f2m2d-",
        "00000-gpu.nvidia.com-capi-dralabs-md-gpua5000-jw4mx-d64jz-",
    ]
    bad = render_cli("--driver-release", "0.6.0")
    assert bad.returncode == 2
    assert f'--driver-release: unknown NVIDIA driver release "0.6.0"; known: {KNOWN}' in bad.stderr


# kubernetes-sigs/dra-driver-nvidia-gpu#1462: a Rubin GPU (NVML architecture 13) on a release whose go-nvlib
# predates v0.12.0 fails the plugin at start with this error (v25.12.0 and v0.4.1: main.go, device_state.go,
# nvlib.go, go-nvlib VisitDevices and GetArchitectureAsString); no slice is published.
RUBIN_ERROR = (
    "error creating driver: error enumerating all possible devices: error enumerating allocatable devices: "
    "error visiting devices: error visiting device: error getting info for GPU {i}: error getting "
    "architecture for device {i}: error interpreting device architecture as string: 13"
)


def rubin_node(*gpus: str) -> Any:
    data = inventory()
    data["nodes"] = [{"name": "n", "gpus": [{"profile": p} for p in gpus]}]
    return parse_inventory(data, source="t")


@pytest.mark.parametrize(
    ("release", "names_rubin"), [("25.12", False), ("0.4.1", False), ("0.5.0-dev", True), ("0.5.0", True)]
)
def test_only_releases_with_go_nvlib_0_12_publish_a_rubin_gpu(release: str, names_rubin: bool) -> None:
    r = releases.get(release)
    assert ("Rubin" in r.architectures) is names_rubin
    assert r.architectures >= {"Hopper", "Blackwell"}
    inv = rubin_node("t4", "vr200")  # GPU 1 is the first the plugin cannot name
    if names_rubin:
        (rs,) = node_slices(inv, "n", node_uid="u", driver="gpu.nvidia.com", release=r)
        archs = [d["attributes"]["architecture"]["string"] for d in rs["spec"]["devices"]]
        assert archs == ["Turing", "Rubin"]
        return
    with pytest.raises(EnumerationError) as exc:
        node_slices(inv, "n", node_uid="u", driver="gpu.nvidia.com", release=r)
    assert str(exc.value) == RUBIN_ERROR.format(i=1)
    with pytest.raises(EnumerationError, match=r"for GPU 0: .* string: 13$"):
        node_slices(rubin_node("vr200", "vr200"), "n", node_uid="u", driver="gpu.nvidia.com", release=r)


def test_render_of_a_rubin_node_on_the_labs_release_fails_with_the_drivers_error(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    data = inventory(driverRelease="25.12")
    data["nodes"] = [{"name": "n", "gpus": [{"profile": "vr200"}]}]
    path.write_text(yaml.safe_dump(data))
    result = render_cli("--inventory", str(path))
    assert result.returncode == 1
    assert RUBIN_ERROR.format(i=0) in result.stderr
    newer = render_cli("--inventory", str(path), "--driver-release", "0.5.0")
    assert newer.returncode == 0, newer.stderr
    assert "string: Rubin" in newer.stdout
    del data["driverRelease"]  # the default, 0.5.0, names Rubin
    path.write_text(yaml.safe_dump(data))
    default = render_cli("--inventory", str(path))
    assert default.returncode == 0, default.stderr
    assert default.stdout == newer.stdout
