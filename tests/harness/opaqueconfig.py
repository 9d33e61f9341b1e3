"""Opaque device configs in one allocation, as tests/test_opaqueconfig*.py build and judge them: the pool
(`DEVICES`: gpu-0, gpu-1 and a MIG device, `MIG_NAME`), allocation results and config entries (`result`,
`entry`, `gpu_config`, `mig_config`, `timeslicing`, `allocation`), and what prepare.opaqueconfig makes of
them (`configs`, `settings`, `error_of`, `decode_error`), release 0.4.1 unless told (`V0_4_1`, `V25_12`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from fakeplugin import releases
from fakeplugin.drivers.gpu.prepare import opaqueconfig as oc
from fakeplugin.model import DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.prepare import gpu

NODE = "node-a"
CLAIM_UID = "0000000a-aaaa-4bbb-8ccc-dddddddddddd"
ALL_ON = {"TimeSlicingSettings": True, "MPSSupport": True}
TS_ON = {"TimeSlicingSettings": True}
MIG_NAME = "gpu-2-mig-1g18gb-19-0"
V0_4_1 = releases.get("0.4.1")
V25_12 = releases.get("25.12")


def mig(parent: int = 2, start: int = 0) -> GpuDevice:
    return replace(
        gpu(parent), name=f"gpu-{parent}-mig-1g18gb-19-{start}", type="mig", uuid=f"MIG-{parent:08x}-{start}"
    )


DEVICES = {d.name: d for d in (gpu(0), gpu(1), mig())}


def result(device: str, request: str = "gpu", *, driver: str = DRIVER, pool: str = NODE) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def entry(parameters: Any, *requests: str, source: str = "FromClaim", driver: str = DRIVER) -> dict[str, Any]:
    out: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        out["requests"] = list(requests)
    return out


def gpu_config(**sharing: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    if sharing:
        params["sharing"] = sharing
    return params


def mig_config(**sharing: Any) -> dict[str, Any]:
    return {**gpu_config(**sharing), "kind": "MigDeviceConfig"}


def timeslicing(interval: str | None = None) -> dict[str, Any]:
    return gpu_config(
        strategy="TimeSlicing", **({"timeSlicingConfig": {"interval": interval}} if interval else {})
    )


def allocation(*results: dict[str, str], configs: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"devices": {"results": list(results), "config": list(configs)}}


def configs(
    alloc: dict[str, Any], gates: dict[str, bool] | None = None, release: releases.DriverRelease = V0_4_1
) -> dict[str, oc.DeviceConfig]:
    return oc.effective_configs(
        alloc, DEVICES, driver_name=DRIVER, pool_name=NODE, gates=gates or {}, release=release
    )


def settings(
    alloc: dict[str, Any], gates: dict[str, bool] | None = None, release: releases.DriverRelease = V0_4_1
) -> dict[str, DeviceSettings]:
    return oc.device_settings(
        alloc,
        DEVICES,
        driver_name=DRIVER,
        pool_name=NODE,
        claim_uid=CLAIM_UID,
        gates=gates or {},
        release=release,
    )


def error_of(
    alloc: dict[str, Any], gates: dict[str, bool] | None = None, release: releases.DriverRelease = V0_4_1
) -> str:
    with pytest.raises(oc.OpaqueConfigError) as info:
        settings(alloc, gates, release)
    return str(info.value)


def decode_error(parameters: Any) -> str:
    return error_of(allocation(result("gpu-0"), configs=(entry(parameters),)), ALL_ON)
