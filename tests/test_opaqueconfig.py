"""Opaque device configs (prepare.opaqueconfig): decoding, precedence, gates, defaults, validation errors;
their effects (MPS daemons, applying errors, the env) are tests/test_opaqueconfig_effects.py's.

Expected messages are the real driver's (kubernetes-sigs/dra-driver-nvidia-gpu
api/nvidia.com/resource/v1beta1/ at v25.12.0 and v0.4.1), below `prepare devices failed: `.
The helpers (tests/harness/opaqueconfig.py) test release 0.4.1 unless told otherwise; the tests of 25.12's
differences name it.
"""

from __future__ import annotations

from typing import Any

import pytest

from fakeplugin.drivers.gpu.prepare import opaqueconfig as oc
from fakeplugin.model import DeviceSettings
from tests.harness.opaqueconfig import (
    ALL_ON,
    MIG_NAME,
    TS_ON,
    V0_4_1,
    V25_12,
    allocation,
    configs,
    decode_error,
    entry,
    error_of,
    gpu_config,
    mig_config,
    result,
    settings,
    timeslicing,
)

DECODING = "error getting opaque device configs: error decoding config parameters: "


# ---- decoding --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({**gpu_config(), "x": 1}, 'strict decoding error: unknown field "x"'),
        (gpu_config(strategy="TimeSlicing", foo=1), 'strict decoding error: unknown field "sharing.foo"'),
        (
            {**gpu_config(strategy="MPS", mpsConfig={"threads": 1}), "metadata": {}, "Sharing": {}},
            'strict decoding error: unknown field "sharing.mpsConfig.threads", unknown field "metadata", '
            'unknown field "Sharing"',
        ),
        (
            mig_config(strategy="TimeSlicing", timeSlicingConfig={}),
            'strict decoding error: unknown field "sharing.timeSlicingConfig"',
        ),
        (
            {**gpu_config(strategy=5), "x": 1},  # a type error wins over unknown fields
            "json: cannot unmarshal number into Go struct field GpuSharing.sharing.strategy "
            "of type v1beta1.GpuSharingStrategy",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": "50"}),
            "json: cannot unmarshal string into Go struct field "
            "MpsConfig.sharing.mpsConfig.defaultActiveThreadPercentage of type int",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 1.5}),
            "json: cannot unmarshal number 1.5 into Go struct field "
            "MpsConfig.sharing.mpsConfig.defaultActiveThreadPercentage of type int",
        ),
        (
            {**gpu_config(), "sharing": "TimeSlicing"},
            "json: cannot unmarshal string into Go struct field GpuConfig.sharing of type v1beta1.GpuSharing",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "10 apples"}),
            "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultPerDevicePinnedMemoryLimit": {"0": "1Mm"}}),
            "unable to parse quantity's suffix",
        ),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "sharing": {}},
            """Object 'Kind' is missing in '{"apiVersion":"resource.nvidia.com/v1beta1","sharing":{}}'""",
        ),
        ({"kind": "GpuConfig"}, """Object 'apiVersion' is missing in '{"kind":"GpuConfig"}'"""),
        (
            {**gpu_config(), "kind": "GpuSettings"},
            'no kind "GpuSettings" is registered for version "resource.nvidia.com/v1beta1" in scheme '
            f'"{oc.SCHEME_NAME}"',
        ),
        (
            {**gpu_config(), "apiVersion": "v1"},
            f'no kind "GpuConfig" is registered for version "v1" in scheme "{oc.SCHEME_NAME}"',
        ),
        ({**gpu_config(), "apiVersion": "a/b/c"}, "unexpected GroupVersion string: a/b/c"),
        (
            {**gpu_config(), "kind": 3},
            "couldn't get version/kind; json parse error: json: cannot unmarshal number "
            "into Go struct field .kind of type string",
        ),
    ],
)
def test_decoding_errors_read_as_upstreams(parameters: Any, message: str) -> None:
    assert decode_error(parameters) == DECODING + message


def test_decoding_drops_nulls_and_type_meta() -> None:
    params = gpu_config(strategy="TimeSlicing", timeSlicingConfig=None, mpsConfig=None)
    assert oc.decode(params) == ("GpuConfig", {"sharing": {"strategy": "TimeSlicing"}})
    vfio = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", "iommu": {}}
    assert oc.decode(vfio, V0_4_1) == ("VfioDeviceConfig", {"iommu": {}})


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Gi", 2**30),
        ("1.5G", 1_500_000_000),
        ("100M", 10**8),
        ("1e3", 1000),
        (2048, 2048),
        ("0.5", 1),
        ("10m", 1),
        ("-1.5", -2),
        (" 3Ki ", 3072),
    ],
)
def test_quantity_values_round_up_away_from_zero(text: Any, value: int) -> None:
    assert oc.quantity_bytes(text) == value


# ---- the config list -------------------------------------------------------------------------------------


def test_configs_of_other_drivers_are_skipped_even_when_they_would_not_decode() -> None:
    alloc = allocation(result("gpu-0"), configs=(entry({"anything": True}, driver="other.example.com"),))
    assert configs(alloc) == {"gpu-0": oc.DeviceConfig("GpuConfig", {}, "Default", (), 1)}


def test_a_config_without_opaque_parameters_is_refused_even_for_another_driver() -> None:
    alloc = allocation(result("gpu-0"), configs=({"source": "FromClaim", "requests": ["other"]},))
    assert error_of(alloc) == (
        "error getting opaque device configs: only opaque parameters are supported by this driver"
    )


def test_an_unknown_config_source_is_refused() -> None:
    alloc = allocation(result("gpu-0"), configs=({**entry(gpu_config()), "source": "FromNode"},))
    assert error_of(alloc) == "error getting opaque device configs: invalid config source: FromNode"


# ---- precedence ------------------------------------------------------------------------------------------


def test_claim_configs_override_class_configs_whatever_their_order_in_the_list() -> None:
    alloc = allocation(
        result("gpu-0"),
        configs=(
            entry(timeslicing("Short"), source="FromClaim"),
            entry(timeslicing("Long"), source="FromClass"),
        ),
    )
    chosen = configs(alloc, TS_ON)["gpu-0"]
    assert (chosen.source, chosen.spec["sharing"]["timeSlicingConfig"]["interval"]) == ("FromClaim", "Short")


def test_the_last_matching_config_wins_even_an_unnamed_one_over_a_named_one() -> None:
    alloc = allocation(
        result("gpu-0"),
        configs=(
            entry(timeslicing("Short"), "gpu"),
            entry(timeslicing("Medium")),
            entry(timeslicing("Long"), "x"),
        ),
    )
    assert settings(alloc, TS_ON) == {"gpu-0": DeviceSettings("TimeSlicing", timeslice_interval="Medium")}


def test_configs_apply_to_their_requests_only() -> None:
    alloc = allocation(
        result("gpu-0", "small"), result("gpu-1", "big"), configs=(entry(timeslicing("Long"), "big"),)
    )
    assert settings(alloc, TS_ON) == {"gpu-1": DeviceSettings("TimeSlicing", timeslice_interval="Long")}


def test_a_config_naming_the_main_request_does_not_match_a_subrequest_as_upstream() -> None:
    alloc = allocation(result("gpu-0", "gpu/fast"), configs=(entry(timeslicing("Long"), "gpu"),))
    assert settings(alloc, TS_ON) == {}
    alloc = allocation(result("gpu-0", "gpu/fast"), configs=(entry(timeslicing("Long"), "gpu/fast"),))
    assert settings(alloc, TS_ON) == {"gpu-0": DeviceSettings("TimeSlicing", timeslice_interval="Long")}


def test_results_of_other_drivers_and_pools_are_not_ours() -> None:
    alloc = allocation(
        result("gpu-0", driver="other.example.com"),
        result("gpu-1", pool="node-b"),
        result("gpu-1"),
        configs=(entry(timeslicing("Long")),),
    )
    assert set(configs(alloc, TS_ON)) == {"gpu-1"}


def test_whole_objects_win_without_merging_fields() -> None:
    alloc = allocation(
        result("gpu-0"),
        configs=(entry(timeslicing("Long"), source="FromClass"), entry(gpu_config(), source="FromClaim")),
    )
    assert configs(alloc, TS_ON)["gpu-0"].spec == {}
    assert settings(alloc, TS_ON) == {}


@pytest.mark.parametrize(
    ("parameters", "device", "kind", "device_type"),
    [
        (timeslicing("Long"), MIG_NAME, "GpuConfig", "mig"),
        (mig_config(strategy="MPS"), "gpu-0", "MigDeviceConfig", "gpu"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig"},
            "gpu-0",
            "VfioDeviceConfig",
            "gpu",
        ),
    ],
)
def test_a_config_naming_a_request_of_another_device_type_is_an_error(
    parameters: dict[str, Any], device: str, kind: str, device_type: str
) -> None:
    alloc = allocation(result(device, "r"), configs=(entry(parameters, "r"),))
    assert (
        error_of(alloc, ALL_ON)
        == f'cannot apply {kind} to device "{device}" of type "{device_type}" (request: r)'
    )


def test_an_unnamed_config_applies_only_to_its_device_type() -> None:
    alloc = allocation(
        result("gpu-0"),
        result(MIG_NAME),
        configs=(
            entry(timeslicing("Long")),
            entry(mig_config(strategy="MPS")),
            entry({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig"}),
        ),
    )
    chosen = configs(alloc, ALL_ON)
    assert (chosen["gpu-0"].kind, chosen["gpu-0"].group) == ("GpuConfig", 2)
    assert (chosen[MIG_NAME].kind, chosen[MIG_NAME].group) == ("MigDeviceConfig", 3)


def test_devices_without_configs_get_the_implicit_defaults_and_no_settings() -> None:
    alloc = allocation(result("gpu-0"), result(MIG_NAME))
    assert configs(alloc, ALL_ON) == {
        "gpu-0": oc.DeviceConfig("GpuConfig", {}, "Default", (), 1),
        MIG_NAME: oc.DeviceConfig("MigDeviceConfig", {}, "Default", (), 0),
    }
    assert settings(alloc, ALL_ON) == {}


def test_an_allocated_device_missing_from_the_pool_is_an_error() -> None:
    assert error_of(allocation(result("gpu-9"))) == 'allocatable not found for device "gpu-9"'


# ---- defaults and gates ----------------------------------------------------------------------------------


def test_normalization_fills_the_interval_and_the_mps_config_when_gated_on() -> None:
    alloc = allocation(
        result("gpu-0", "a"),
        result("gpu-1", "b"),
        configs=(entry(gpu_config(strategy="TimeSlicing"), "a"), entry(gpu_config(strategy="MPS"), "b")),
    )
    chosen = configs(alloc, ALL_ON)
    assert chosen["gpu-0"].spec == {
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    }
    assert chosen["gpu-1"].spec == {"sharing": {"strategy": "MPS", "mpsConfig": {}}}
    assert configs(alloc, {})["gpu-0"].spec == {
        "sharing": {"strategy": "TimeSlicing"}
    }  # gates off: untouched


def test_an_empty_timeslicing_config_means_the_default_interval() -> None:
    alloc = allocation(
        result("gpu-0"), configs=(entry(gpu_config(strategy="TimeSlicing", timeSlicingConfig={})),)
    )
    assert settings(alloc, TS_ON) == {"gpu-0": DeviceSettings("TimeSlicing", timeslice_interval="Default")}


VALIDATING = "error validating GPU config: "


@pytest.mark.parametrize(
    ("parameters", "gates", "message"),
    [
        (
            timeslicing("Long"),
            {"MPSSupport": True},
            '"TimeSlicing" is selected as the GPU sharing strategy, '
            'but the "TimeSlicingSettings" feature gate is not enabled',
        ),
        (
            gpu_config(strategy="MPS"),
            TS_ON,
            '"MPS" is selected as the GPU sharing strategy, but the "MPSSupport" feature gate is not enabled',
        ),
        (
            gpu_config(strategy="Fabric"),
            ALL_ON,
            "unknown GPU sharing strategy: Fabric, supported GPU sharing strategies: TimeSlicing, MPS",
        ),
        (
            gpu_config(timeSlicingConfig={"interval": "Long"}),
            ALL_ON,
            "unknown GPU sharing strategy: , supported GPU sharing strategies: TimeSlicing, MPS",
        ),
        (
            timeslicing("Forever"),
            ALL_ON,
            "unknown time-slice interval: Forever, "
            "supported time-slice intervals: Default, Short, Medium, Long",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": -1}),
            ALL_ON,
            "active thread percentage must not be negative",
        ),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 101}),
            ALL_ON,
            "active thread percentage must not be greater than 100",
        ),
    ],
)
def test_validation_errors_read_as_upstreams(
    parameters: dict[str, Any], gates: dict[str, bool], message: str
) -> None:
    assert error_of(allocation(result("gpu-0"), configs=(entry(parameters),)), gates) == VALIDATING + message


def test_mig_sharing_is_gated_and_validated_like_gpu_sharing() -> None:
    alloc = allocation(result(MIG_NAME), configs=(entry(mig_config(strategy="TimeSlicing")),))
    assert error_of(alloc, {"MPSSupport": True}) == VALIDATING + (
        '"TimeSlicing" is selected as the GPU sharing strategy, but the "TimeSlicingSettings" feature gate '
        "is not enabled"
    )
    assert settings(alloc, TS_ON) == {MIG_NAME: DeviceSettings("TimeSlicing")}  # no interval on MIG devices


# ---------------------------------------------------------------------------------------------------------
# Release 25.12 (api/nvidia.com/resource/v1beta1 at v25.12.0): what differs from 0.4.1.


def test_25_12_gives_configs_without_sharing_an_implicit_timeslicing_while_its_gate_is_on() -> None:
    alloc = allocation(result("gpu-0"), result(MIG_NAME))
    chosen = configs(alloc, TS_ON, V25_12)
    assert chosen["gpu-0"].spec == {
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    }
    assert chosen[MIG_NAME].spec == {"sharing": {"strategy": "TimeSlicing"}}
    assert settings(alloc, TS_ON, V25_12) == {
        "gpu-0": DeviceSettings("TimeSlicing", timeslice_interval="Default"),
        MIG_NAME: DeviceSettings("TimeSlicing"),
    }
    assert configs(alloc, {}, V25_12)["gpu-0"].spec == {}  # gate off: nothing implied
    assert configs(alloc, TS_ON, V0_4_1)["gpu-0"].spec == {}  # PR #1183: no implicit TimeSlicing


@pytest.mark.parametrize(
    ("parameters", "gates", "message"),
    [
        (gpu_config(strategy="TimeSlicing"), {}, "unknown GPU sharing strategy: TimeSlicing"),
        (gpu_config(strategy="MPS"), TS_ON, "unknown GPU sharing strategy: MPS"),
        (gpu_config(strategy="Fabric"), ALL_ON, "unknown GPU sharing strategy: Fabric"),
        (timeslicing("Forever"), TS_ON, "unknown time-slice interval: Forever"),
        (
            gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 101}),
            ALL_ON,
            "active thread percentage must not be greater than 100",
        ),
    ],
)
def test_25_12_validation_errors_are_terse(
    parameters: dict[str, Any], gates: dict[str, bool], message: str
) -> None:
    alloc = allocation(result("gpu-0"), configs=(entry(parameters),))
    assert error_of(alloc, gates, V25_12) == "error validating GPU config: " + message


def test_25_12_has_no_iommu_in_vfio_device_config() -> None:
    vfio = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "VfioDeviceConfig", "iommu": {}}
    alloc = allocation(result("gpu-0"), configs=(entry(vfio, "other"),))
    assert error_of(alloc, ALL_ON, V25_12) == DECODING + 'strict decoding error: unknown field "iommu"'
    assert oc.decode({k: v for k, v in vfio.items() if k != "iommu"}, V25_12) == ("VfioDeviceConfig", {})
