"""What a real NVML consumer sees: run as a script, in a process whose LD_LIBRARY_PATH finds the mock
`libnvidia-ml.so.1` (nvidia-ml-py loads it by that name only), it asks NVIDIA's Python binding (pynvml,
PyPI nvidia-ml-py) everything tests/test_nvml.py checks and prints it as one JSON object. Also the raw
ctypes calls PyTorch makes (torch/cuda/__init__.py `_raw_device_count_nvml`: the unversioned `nvmlInit`,
then `nvmlDeviceGetCount_v2`). An NVML error is `{"error": <code>}` in place of the value.
"""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Callable
from typing import Any

import pynvml


def ask(call: Callable[..., Any], *args: Any) -> Any:
    try:
        value = call(*args)
    except pynvml.NVMLError as e:
        return {"error": e.value}
    if isinstance(value, ctypes.c_uint | ctypes.c_int):  # what a few wrappers return as they got it
        return value.value
    return text(value) if isinstance(value, str | bytes) else value


def text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def pci(handle: Any) -> Any:
    info = ask(pynvml.nvmlDeviceGetPciInfo, handle)
    if isinstance(info, dict):
        return info
    return {
        "busId": text(info.busId),
        "busIdLegacy": text(info.busIdLegacy),
        "domain": info.domain,
        "bus": info.bus,
        "device": info.device,
        "pciDeviceId": info.pciDeviceId,
        "pciSubSystemId": info.pciSubSystemId,
    }


def memory(handle: Any) -> Any:
    v1 = ask(pynvml.nvmlDeviceGetMemoryInfo, handle)
    v2 = ask(pynvml.nvmlDeviceGetMemoryInfo, handle, pynvml.nvmlMemory_v2)
    if isinstance(v1, dict) or isinstance(v2, dict):
        return {"v1": v1, "v2": v2}
    return {
        "v1": {"total": v1.total, "free": v1.free, "used": v1.used},
        "v2": {"total": v2.total, "reserved": v2.reserved, "free": v2.free, "used": v2.used},
    }


def utilization(handle: Any) -> dict[str, int]:
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    return {"gpu": rates.gpu, "memory": rates.memory}


def mig_device(handle: Any) -> dict[str, Any]:
    parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return {
        "name": ask(pynvml.nvmlDeviceGetName, handle),
        "uuid": ask(pynvml.nvmlDeviceGetUUID, handle),
        "is_mig": ask(pynvml.nvmlDeviceIsMigDeviceHandle, handle),
        "parent_uuid": ask(pynvml.nvmlDeviceGetUUID, parent),
        "memory": memory(handle),
        "gpu_instance_id": ask(pynvml.nvmlDeviceGetGpuInstanceId, handle),
        "compute_instance_id": ask(pynvml.nvmlDeviceGetComputeInstanceId, handle),
        "pci": pci(handle),
        "by_uuid": ask(lambda: pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(
            pynvml.nvmlDeviceGetUUID(handle)))),
        "mig_mode": ask(pynvml.nvmlDeviceGetMigMode, handle),
        "temperature": ask(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
    }  # fmt: skip


def index_by_pci(bus_id: str) -> int:
    return pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByPciBusId(bus_id))


def gpu(handle: Any) -> dict[str, Any]:
    info = {
        "index": ask(pynvml.nvmlDeviceGetIndex, handle),
        "name": ask(pynvml.nvmlDeviceGetName, handle),
        "uuid": ask(pynvml.nvmlDeviceGetUUID, handle),
        "serial": ask(pynvml.nvmlDeviceGetSerial, handle),
        "minor": ask(pynvml.nvmlDeviceGetMinorNumber, handle),
        "pci": pci(handle),
        "memory": memory(handle),
        "cc": ask(pynvml.nvmlDeviceGetCudaComputeCapability, handle),
        "architecture": ask(pynvml.nvmlDeviceGetArchitecture, handle),
        "brand": ask(pynvml.nvmlDeviceGetBrand, handle),
        "power_limit": ask(pynvml.nvmlDeviceGetPowerManagementLimit, handle),
        "power_usage": ask(pynvml.nvmlDeviceGetPowerUsage, handle),
        "temperature": ask(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
        "utilization": ask(utilization, handle),
        "processes": ask(pynvml.nvmlDeviceGetComputeRunningProcesses, handle),
        "mig_mode": ask(pynvml.nvmlDeviceGetMigMode, handle),
        "is_mig": ask(pynvml.nvmlDeviceIsMigDeviceHandle, handle),
        "max_mig_devices": ask(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle),
        "clock_sm": ask(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "max_clock_sm": ask(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
        "ecc_mode": ask(pynvml.nvmlDeviceGetEccMode, handle),
        "by_uuid": ask(lambda: pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(
            pynvml.nvmlDeviceGetUUID(handle)))),
    }  # fmt: skip
    bus_id = info["pci"].get("busId") if "error" not in info["pci"] else None
    if bus_id:
        info["by_pci"] = ask(index_by_pci, bus_id)
        info["by_short_pci"] = ask(index_by_pci, bus_id[4:].lower())  # 0000:3b:00.0, the slice's form
    migs = []
    for i in range(info["max_mig_devices"] if isinstance(info["max_mig_devices"], int) else 0):
        found = ask(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
        migs.append(found if isinstance(found, dict) else mig_device(found))
    info["migs"] = migs
    return info


def torch_count() -> Any:
    """PyTorch's NVML device count, as torch/cuda/__init__.py asks it: raw ctypes, no pynvml (no library:
    PyTorch falls back to CUDA; here NVML's LIBRARY_NOT_FOUND, as pynvml says it)."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return {"error": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND}
    rc = lib.nvmlInit()
    if rc != 0:
        return {"error": rc}
    count = ctypes.c_int()
    rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
    return {"error": rc} if rc != 0 else count.value


def main() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        print(json.dumps({"init": e.value, "message": str(e), "torch_count": torch_count()}))
        return
    count = pynvml.nvmlDeviceGetCount()
    result = {
        "init": 0,
        "driver_version": ask(pynvml.nvmlSystemGetDriverVersion),
        "nvml_version": ask(pynvml.nvmlSystemGetNVMLVersion),
        "cuda_driver_version": ask(pynvml.nvmlSystemGetCudaDriverVersion),
        "cuda_driver_version_v2": ask(pynvml.nvmlSystemGetCudaDriverVersion_v2),
        "count": count,
        "gpus": [gpu(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)],
        "out_of_range": ask(pynvml.nvmlDeviceGetHandleByIndex, count),
        "unknown_uuid": ask(pynvml.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000"),
        "torch_count": torch_count(),
    }
    print(json.dumps(result))


def raw() -> None:
    """The C calls themselves, without pynvml's own checks: init state, bad arguments, shutdowns."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    lib.nvmlErrorString.restype = ctypes.c_char_p
    n = ctypes.c_uint()
    handle = ctypes.c_void_p()
    name = ctypes.create_string_buffer(96)
    result = {
        "count_before_init": lib.nvmlDeviceGetCount_v2(ctypes.byref(n)),
        "stub_before_init": lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(n)),
        "init": lib.nvmlInit_v2(),
        "init_again": lib.nvmlInitWithFlags(0),
        "stub_after_init": lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(n)),
        "null_handle": lib.nvmlDeviceGetName(handle, name, 96),
        "stray_handle": lib.nvmlDeviceGetName(ctypes.c_void_p(id(name)), name, 96),
        "handle": lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)),
        "null_output": lib.nvmlDeviceGetName(handle, None, 96),
        "small_buffer": lib.nvmlDeviceGetName(handle, name, 4),
        "null_count": lib.nvmlDeviceGetCount_v2(None),
        "unversioned_count": lib.nvmlDeviceGetCount(ctypes.byref(n)),
        "unversioned_count_value": n.value,
        "memory_v2_unversioned": lib.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.create_string_buffer(40)),
        "shutdowns": [lib.nvmlShutdown() for _ in range(3)],
        "count_after_shutdown": lib.nvmlDeviceGetCount_v2(ctypes.byref(n)),
        "error_strings": {code: lib.nvmlErrorString(code).decode() for code in [*range(31), 999, 12345]},
    }  # fmt: skip
    print(json.dumps(result))


def live() -> None:
    """The calls that read a device's live state and the event API, raw: each call's code, whatever the
    state says (no pynvml: it raises on the first error)."""
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    n, value = ctypes.c_uint(), ctypes.c_uint()
    result: dict[str, Any] = {"init": lib.nvmlInit_v2(), "count": lib.nvmlDeviceGetCount_v2(ctypes.byref(n))}
    events = ctypes.c_void_p()
    result["set"] = lib.nvmlEventSetCreate(ctypes.byref(events))
    codes = []
    for i in range(n.value):
        handle = ctypes.c_void_p()
        codes.append(lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle)))
        codes.append(lib.nvmlDeviceGetMemoryInfo(handle, ctypes.create_string_buffer(24)))
        codes.append(lib.nvmlDeviceGetUtilizationRates(handle, ctypes.create_string_buffer(8)))
        codes.append(lib.nvmlDeviceGetTemperature(handle, 0, ctypes.byref(value)))
        codes.append(lib.nvmlDeviceGetPowerUsage(handle, ctypes.byref(value)))
        codes.append(lib.nvmlDeviceRegisterEvents(handle, ctypes.c_ulonglong(8), events))
        mig = ctypes.c_void_p()
        if lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0, ctypes.byref(mig)) == 0:
            codes.append(lib.nvmlDeviceGetMemoryInfo(mig, ctypes.create_string_buffer(24)))
    result["codes"] = sorted(set(codes))
    result["wait"] = lib.nvmlEventSetWait_v2(events, ctypes.create_string_buffer(32), 0)
    result["free"] = lib.nvmlEventSetFree(events)
    print(json.dumps(result))


if __name__ == "__main__":
    {"raw": raw, "live": live}.get(sys.argv[1] if sys.argv[1:] else "", main)()
