"""Opaque device configs (prepare.opaqueconfig): their effects once chosen and valid (MPS control daemons and
their limits, the errors of applying them) and the settings' environment (cdispec.settings_env).

Expected messages are the real driver's (kubernetes-sigs/dra-driver-nvidia-gpu
api/nvidia.com/resource/v1beta1/ at v0.4.1), below `prepare devices failed: `; tests/test_opaqueconfig.py
has decoding, precedence, defaults and gates, and 25.12's differences.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest

from fakeplugin.drivers.gpu.prepare import opaqueconfig as oc
from fakeplugin.drivers.gpu.prepare.cdispec import settings_env
from fakeplugin.model import DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.opaqueconfig import (
    ALL_ON,
    CLAIM_UID,
    DEVICES,
    MIG_NAME,
    NODE,
    V0_4_1,
    allocation,
    entry,
    error_of,
    gpu_config,
    mig,
    mig_config,
    result,
    settings,
)
from tests.harness.prepare import gpu

# ---- effects ---------------------------------------------------------------------------------------------

APPLYING = "error applying config: "


def test_timeslicing_with_an_mps_config_fails_when_applied_naming_requests_and_claim() -> None:
    params = gpu_config(strategy="TimeSlicing", mpsConfig={})
    alloc = allocation(result("gpu-0", "a"), result("gpu-1", "b"), configs=(entry(params),))
    assert error_of(alloc, ALL_ON) == APPLYING + (
        f"error getting timeslice config for requests '[a b]' in claim '{CLAIM_UID}': "
        "cannot use MpsConfig with the 'TimeSlicing' strategy"
    )


def test_mps_with_a_timeslicing_config_fails_when_applied() -> None:
    params = gpu_config(strategy="MPS", timeSlicingConfig={"interval": "Long"})
    assert error_of(allocation(result("gpu-0"), configs=(entry(params),)), ALL_ON) == APPLYING + (
        "error getting MPS configuration: cannot use TimeSlicingConfig with the 'MPS' strategy"
    )


def test_mps_is_refused_with_dynamic_mig() -> None:
    alloc = allocation(result("gpu-0"), configs=(entry(gpu_config(strategy="MPS")),))
    assert error_of(alloc, {**ALL_ON, "DynamicMIG": True}) == (
        APPLYING + "MPS is not yet supported when using featureGates.DynamicMIG=true"
    )


def daemon(*devices: GpuDevice) -> str:
    uuids = ",".join(sorted(d.uuid for d in devices))
    return f"mps-control-daemon-{CLAIM_UID}-{hashlib.sha256(uuids.encode()).hexdigest()[:5]}"


def test_mps_settings_share_one_daemon_per_config_with_default_and_per_device_limits() -> None:
    mps = {
        "defaultActiveThreadPercentage": 50,
        "defaultPinnedDeviceMemoryLimit": "10Gi",
        "defaultPerDevicePinnedMemoryLimit": {gpu(1).uuid: "1Gi"},
        "multiUser": True,
    }
    alloc = allocation(
        result("gpu-1", "a"),
        result("gpu-0", "a"),
        configs=(entry(gpu_config(strategy="MPS", mpsConfig=mps)),),
    )
    common = {
        "mps_control_daemon": daemon(gpu(0), gpu(1)),
        "mps_active_thread_percentage": 50,
        "mps_multi_user": True,
    }
    assert settings(alloc, ALL_ON) == {
        "gpu-1": DeviceSettings("MPS", mps_pinned_device_memory_limit="1024M", **common),
        "gpu-0": DeviceSettings("MPS", mps_pinned_device_memory_limit="10240M", **common),
    }


def test_mps_per_device_limits_by_index_follow_the_sorted_uuids() -> None:
    mps = {"defaultPerDevicePinnedMemoryLimit": {"1": "512Mi"}}
    alloc = allocation(
        result("gpu-1"), result("gpu-0"), configs=(entry(gpu_config(strategy="MPS", mpsConfig=mps)),)
    )
    got = settings(alloc, ALL_ON)
    assert (got["gpu-0"].mps_pinned_device_memory_limit, got["gpu-1"].mps_pinned_device_memory_limit) == (
        None,
        "512M",
    )


def test_two_configs_make_two_daemons() -> None:
    alloc = allocation(
        result("gpu-0", "a"),
        result("gpu-1", "b"),
        configs=(entry(gpu_config(strategy="MPS"), "a"), entry(gpu_config(strategy="MPS"), "b")),
    )
    got = settings(alloc, ALL_ON)
    assert (got["gpu-0"].mps_control_daemon, got["gpu-1"].mps_control_daemon) == (
        daemon(gpu(0)),
        daemon(gpu(1)),
    )


MPS_START = APPLYING + "error starting MPS control daemon: "


@pytest.mark.parametrize(
    ("mps", "message"),
    [
        ({"defaultPinnedDeviceMemoryLimit": "1Ki"}, "invalid limit: default value set too low: 1Ki"),
        ({"defaultPerDevicePinnedMemoryLimit": {"0": "100k"}}, "invalid limit: value set too low: 0: 100k"),
        (
            {"defaultPerDevicePinnedMemoryLimit": {"first": "1Gi"}},
            "invalid device: unable to parse key as an integer: first",
        ),
        ({"defaultPerDevicePinnedMemoryLimit": {"2": "1Gi"}}, "invalid device: invalid device index: 2"),
    ],
)
def test_bad_pinned_memory_limits_fail_the_daemon_start(mps: dict[str, Any], message: str) -> None:
    alloc = allocation(
        result("gpu-0"), result("gpu-1"), configs=(entry(gpu_config(strategy="MPS", mpsConfig=mps)),)
    )
    assert error_of(alloc, ALL_ON) == (
        MPS_START + "error transforming DefaultPerDevicePinnedMemoryLimit into string: " + message
    )


def test_multi_user_mps_needs_volta_or_newer() -> None:
    old = {name: replace(d, cuda_compute_capability="6.1") for name, d in DEVICES.items()}
    alloc = allocation(
        result("gpu-0"),
        result("gpu-1"),
        configs=(entry(gpu_config(strategy="MPS", mpsConfig={"multiUser": True})),),
    )
    with pytest.raises(oc.OpaqueConfigError) as info:
        oc.device_settings(
            alloc, old, driver_name=DRIVER, pool_name=NODE, claim_uid=CLAIM_UID, gates=ALL_ON, release=V0_4_1
        )
    assert str(info.value) == MPS_START + "multiuser mode was requested but is not supported: " + (
        f'{gpu(1).uuid} has insufficient cudaComputeCapability "6.1", wanted >= "7.0"\n'
        f'{gpu(0).uuid} has insufficient cudaComputeCapability "6.1", wanted >= "7.0"'
    )


def test_mps_on_mig_devices() -> None:
    alloc = allocation(result(MIG_NAME), configs=(entry(mig_config(strategy="MPS")),))
    assert settings(alloc, ALL_ON) == {MIG_NAME: DeviceSettings("MPS", mps_control_daemon=daemon(mig()))}


def test_settings_env() -> None:
    assert settings_env(DeviceSettings("TimeSlicing", timeslice_interval="Long"), "FAKEPLUGIN_GPU_3_") == (
        "FAKEPLUGIN_GPU_3_SHARING_STRATEGY=TimeSlicing",
        "FAKEPLUGIN_GPU_3_TIMESLICE_INTERVAL=Long",
    )
    mps = DeviceSettings(
        "MPS", "x", "mps-control-daemon-u-abcde", 50, "1024M", True
    )  # interval ignored: unset
    assert settings_env(replace(mps, timeslice_interval=None), "P_") == (
        "P_SHARING_STRATEGY=MPS",
        "P_MPS_CONTROL_DAEMON=mps-control-daemon-u-abcde",
        "P_MPS_ACTIVE_THREAD_PERCENTAGE=50",
        "P_MPS_PINNED_DEVICE_MEMORY_LIMIT=1024M",
        "P_MPS_MULTI_USER=true",
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
    )
    assert settings_env(DeviceSettings("MPS"), "P_") == (
        "P_SHARING_STRATEGY=MPS",
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
    )
