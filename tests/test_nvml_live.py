"""NVML's live values and faults (fakeplugin.telemetry.nvmllive, nvml.c): through nvidia-ml-py (pynvml) in a
subprocess, the library reading a container's description with live states beside it.

- One source of truth: utilisation, memory used, temperature and power under a load equal the DCGM series
  fakeplugin.telemetry.samples gives for the same state (full GPUs, static MIG devices and their parent);
- a lost GPU answers NVML_ERROR_GPU_IS_LOST where nvml.h lists it, and still answers where it does not;
- an XID reaches a consumer waiting on the event API (nvmlEventSetWait_v2); a wait with nothing new
  times out with NVML_ERROR_TIMEOUT;
- a bad live state answers NVML_ERROR_UNKNOWN and one stderr line; no live state: the idle description;
- Prepare links each claim's file to its device's and makes the device's live directory; the writer writes
  only into live directories Prepare made, and only what changed; the plugin's loop renders them from its
  node's state and the attribution's loads.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
import yaml

from fakeplugin import nvml
from fakeplugin.commands import serve
from fakeplugin.drivers.gpu.prepare import nvmldata
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from fakeplugin.telemetry import samples
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.load import IDLE, Load
from fakeplugin.telemetry.nvmllive import LiveWriter, node_live, run_live
from tests.harness.nvml import describe, probe

EVENTS = Path(__file__).parent / "harness" / "nvml_events.py"
MIB = 1024 * 1024
LOST = {"error": pynvml.NVML_ERROR_GPU_IS_LOST}
INVENTORY = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: node
  gpus:
  - profile: h200
    count: 2
  - profile: a100-40gb
    mig:
    - {profile: 3g.20gb}
    - {profile: 1g.5gb, count: 2}
"""
MIG_3G = "gpu-2-mig-3g20gb-9-0"
MIG_1G = "gpu-2-mig-1g5gb-19-4"


def node() -> dict[str, GpuDevice]:
    inv = parse_inventory(yaml.safe_load(INVENTORY), "inv.yaml")
    return {d.name: d for d in node_devices(inv, "node", {})}


def container(
    tmp_path: Path,
    devices: Mapping[str, GpuDevice],
    mine: Sequence[str],
    loads: Mapping[str, Load] | None = None,
    faults: Mapping[str, DeviceFault] | None = None,
) -> Path:
    """The description directory of a container that got `mine`, each device's live state beside its file,
    as the node's state makes it."""
    directory = describe(tmp_path / "nvml", [devices[name] for name in mine])
    live(directory, devices, mine, loads or {}, faults or {})
    return directory


def live(
    directory: Path,
    devices: Mapping[str, GpuDevice],
    mine: Sequence[str],
    loads: Mapping[str, Load],
    faults: Mapping[str, DeviceFault],
) -> None:
    texts = node_live(devices, faults, loads)
    for name in mine:
        state = directory / f"{name}.live" / nvmldata.LIVE_STATE
        state.parent.mkdir(exist_ok=True)
        state.write_text(texts[name], encoding="utf-8")


def series(devices: Mapping[str, GpuDevice], loads: Mapping[str, Load]) -> dict[str, dict[int, str]]:
    """DCGM field → value of every entity of the node (a GPU by name, a GPU instance by its MIG device's)."""
    listed = list(devices.values())
    found = samples.entities(listed)
    physical = samples.physical_loads(listed, loads)
    return {
        e.gpu.name: samples.values(e, loads.get(e.gpu.name, IDLE), physical[e.gpu.index], None, 0)
        for e in found
    }


def test_live_values_equal_the_dcgm_series(nvml_library: Path, tmp_path: Path) -> None:
    devices = node()
    loads = {"gpu-1": Load(90, 60), MIG_3G: Load(80, 50), MIG_1G: Load(20, 100)}
    shown = series(devices, loads)
    directory = container(tmp_path, devices, ["gpu-0", "gpu-1", MIG_3G, MIG_1G], loads)
    seen, stderr = probe(nvml_library.parent, directory)
    assert stderr == ""
    idle, busy, a100 = seen["gpus"]
    for gpu, name in ((idle, "gpu-0"), (busy, "gpu-1")):
        fields = shown[name]
        assert gpu["utilization"]["gpu"] == int(fields[203])  # DCGM_FI_DEV_GPU_UTIL
        assert gpu["utilization"]["memory"] == int(fields[204])  # DCGM_FI_DEV_MEM_COPY_UTIL
        assert gpu["memory"]["v2"]["used"] == int(fields[252]) * MIB  # DCGM_FI_DEV_FB_USED
        assert gpu["memory"]["v2"]["reserved"] == int(fields[253]) * MIB
        assert gpu["memory"]["v1"]["used"] == (int(fields[252]) + int(fields[253])) * MIB
        assert gpu["temperature"] == int(fields[150])  # DCGM_FI_DEV_GPU_TEMP
        assert gpu["power_usage"] == round(float(fields[155]) * 1000)  # DCGM_FI_DEV_POWER_USAGE, W
    assert busy["utilization"] == {"gpu": 90, "memory": 45}
    assert busy["temperature"] > idle["temperature"]
    assert busy["power_usage"] > idle["power_usage"]
    assert idle["utilization"] == {"gpu": 0, "memory": 0}
    # MIG: each instance's memory its own load's; the GPU's temperature and power its instances' together.
    by_uuid = {m["uuid"]: m for m in a100["migs"] if "error" not in m}
    for name in (MIG_3G, MIG_1G):
        assert by_uuid[devices[name].uuid]["memory"]["v2"]["used"] == int(shown[name][252]) * MIB
    assert a100["temperature"] == int(shown[MIG_3G][150]) == int(shown[MIG_1G][150])
    assert a100["temperature"] > idle["temperature"]


def test_without_a_live_state_the_description_is_idle(nvml_library: Path, tmp_path: Path) -> None:
    devices = node()
    with_state = probe(nvml_library.parent, container(tmp_path / "a", devices, ["gpu-0"]))[0]["gpus"][0]
    without = probe(nvml_library.parent, describe(tmp_path / "b", [devices["gpu-0"]]))[0]["gpus"][0]
    assert with_state == without


def test_a_lost_gpu_answers_gpu_is_lost(nvml_library: Path, tmp_path: Path) -> None:
    devices = node()
    mine = ["gpu-0", "gpu-1"]
    directory = container(tmp_path, devices, mine)

    def lose() -> None:
        live(directory, devices, mine, {}, {"gpu-1": DeviceFault(lost=True)})

    with subprocess.Popen(
        [sys.executable, "-c", LOST_CALLS, devices["gpu-1"].uuid],
        env=consumer_env(nvml_library, directory),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as consumer:
        assert consumer.stdout is not None and consumer.stdin is not None
        assert consumer.stdout.readline() == "ready\n"  # it holds the GPU's handle
        lose()
        out, err = consumer.communicate("go\n", timeout=60)
    assert consumer.returncode == 0, err
    assert err == ""
    assert json.loads(out) == {
        "count": pynvml.NVML_SUCCESS,  # nvml.h lists GPU_IS_LOST for neither the count nor the architecture
        "architecture": pynvml.NVML_SUCCESS,
        "handle_by_index": pynvml.NVML_ERROR_GPU_IS_LOST,
        "handle_by_uuid": pynvml.NVML_ERROR_GPU_IS_LOST,
        "name": pynvml.NVML_ERROR_GPU_IS_LOST,
        "memory": pynvml.NVML_ERROR_GPU_IS_LOST,
        "power": pynvml.NVML_ERROR_GPU_IS_LOST,
        "other_gpu": pynvml.NVML_SUCCESS,
    }


# Raw calls (pynvml raises on the first error): a handle taken while the GPU answered, then calls on it
# once it is lost.
LOST_CALLS = """
import ctypes, json, sys
lib = ctypes.CDLL("libnvidia-ml.so.1")
lib.nvmlInit_v2()
gpu, other, h = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(gpu))
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(other))
print("ready", flush=True)
sys.stdin.readline()
out = ctypes.c_uint()
name = ctypes.create_string_buffer(96)
print(json.dumps({
    "count": lib.nvmlDeviceGetCount_v2(ctypes.byref(out)),
    "architecture": lib.nvmlDeviceGetArchitecture(gpu, ctypes.byref(out)),
    "handle_by_index": lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h)),
    "handle_by_uuid": lib.nvmlDeviceGetHandleByUUID(sys.argv[1].encode(), ctypes.byref(h)),
    "name": lib.nvmlDeviceGetName(gpu, name, 96),
    "memory": lib.nvmlDeviceGetMemoryInfo(gpu, ctypes.create_string_buffer(24)),
    "power": lib.nvmlDeviceGetPowerUsage(gpu, ctypes.byref(out)),
    "other_gpu": lib.nvmlDeviceGetName(other, name, 96),
}))
"""


def consumer_env(nvml_library: Path, directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != nvml.DESCRIPTION_ENV}
    env["LD_LIBRARY_PATH"] = str(nvml_library.parent)
    env[nvml.DESCRIPTION_ENV] = str(directory)
    return env


def wait_for_event(nvml_library: Path, directory: Path, timeout_ms: int, then: Any) -> dict[str, Any]:
    """Start the events consumer, call `then()` once it waits, return what it printed."""
    with subprocess.Popen(
        [sys.executable, str(EVENTS), str(timeout_ms)],
        env=consumer_env(nvml_library, directory),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as consumer:
        assert consumer.stdout is not None
        assert consumer.stdout.readline() == "ready\n"
        then()
        out, err = consumer.communicate(timeout=60)
    assert consumer.returncode == 0, err
    assert err == ""
    return json.loads(out)


def test_an_injected_xid_reaches_a_waiting_consumer(nvml_library: Path, tmp_path: Path) -> None:
    devices = node()
    mine = ["gpu-0", "gpu-1"]
    directory = container(tmp_path, devices, mine, faults={"gpu-0": DeviceFault(xid=13)})  # before: not sent

    def inject() -> None:
        live(directory, devices, mine, {}, {"gpu-0": DeviceFault(xid=13), "gpu-1": DeviceFault(xid=79)})

    event = wait_for_event(nvml_library, directory, 60_000, inject)
    assert event == {
        "uuid": devices["gpu-1"].uuid,
        "type": pynvml.nvmlEventTypeXidCriticalError,
        "xid": 79,
        "gpu_instance_id": 0xFFFFFFFF,
        "compute_instance_id": 0xFFFFFFFF,
    }


def test_a_mig_devices_xid_reaches_its_gpus_registration(nvml_library: Path, tmp_path: Path) -> None:
    devices = node()
    mine = [MIG_3G]
    directory = container(tmp_path, devices, mine)

    def inject() -> None:
        live(directory, devices, mine, {}, {MIG_3G: DeviceFault(xid=48)})

    event = wait_for_event(nvml_library, directory, 60_000, inject)
    assert event["xid"] == 48
    assert event["uuid"] == devices[MIG_3G].parent_uuid  # registered: the GPU the container lists


def test_a_wait_with_nothing_new_times_out(nvml_library: Path, tmp_path: Path) -> None:
    directory = container(tmp_path, node(), ["gpu-0"], faults={"gpu-0": DeviceFault(xid=79)})
    assert wait_for_event(nvml_library, directory, 200, lambda: None) == {"error": pynvml.NVML_ERROR_TIMEOUT}


def test_a_bad_live_state_is_an_nvml_error_and_one_line(nvml_library: Path, tmp_path: Path) -> None:
    directory = container(tmp_path, node(), ["gpu-0"])
    state = directory / "gpu-0.live" / nvmldata.LIVE_STATE
    state.write_text("format=1\nutilization_gpu=250\n", encoding="utf-8")
    code = (
        "import ctypes, json; lib = ctypes.CDLL('libnvidia-ml.so.1'); h = ctypes.c_void_p(); "
        "print(json.dumps([lib.nvmlInit_v2(), lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)), "
        "lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=consumer_env(nvml_library, directory),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == [
        pynvml.NVML_SUCCESS,
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_UNKNOWN,
    ]
    assert done.stderr == (  # once, however often it is asked
        f'fakeplugin NVML: live state {state}: no "format=1" line, or a value out of range\n'
    )


def test_prepare_links_each_claims_file_to_its_devices_and_the_writer_fills_its_live_directory(
    tmp_path: Path,
) -> None:
    devices = node()
    first, second = "5b0d8c1e-0000-4000-8000-00000000c1a1", "5b0d8c1e-0000-4000-8000-00000000c1a2"
    nvmldata.write_claim_data(tmp_path, first, [devices["gpu-1"]])
    nvmldata.write_claim_data(tmp_path, second, [devices["gpu-1"]])  # a device shared by two claims
    own = nvmldata.device_data_path(tmp_path, "gpu-1")
    for uid in (first, second):
        claim_file = nvmldata.claim_data_path(tmp_path, uid, "gpu-1")
        assert claim_file.read_text() == nvmldata.render_device(devices["gpu-1"])
        assert claim_file.stat().st_ino == own.stat().st_ino  # a link, not a copy
    writer = LiveWriter(tmp_path)
    assert writer.devices() == ["gpu-1"]
    texts = node_live(devices, {}, {"gpu-1": Load(50)})
    writer.write(texts, writer.devices())
    state = nvmldata.live_dir(tmp_path, "gpu-1") / nvmldata.LIVE_STATE
    assert state.read_text() == texts["gpu-1"]
    assert "utilization_gpu=50\n" in texts["gpu-1"]
    inode = state.stat().st_ino
    writer.write(texts, writer.devices())
    assert state.stat().st_ino == inode  # unchanged: not written again
    nvmldata.remove_claim_data(tmp_path, first, ["gpu-1"])
    nvmldata.remove_claim_data(tmp_path, second, ["gpu-1"])
    assert not nvmldata.claim_data_path(tmp_path, first, "gpu-1").exists()
    assert writer.devices() == ["gpu-1"]  # the device's live directory stays for its next claim


class NodeState:
    """A node plugin's view for telemetry (runtime.driver.DeviceStates): its devices and faults."""

    node_name = "node"

    def __init__(self, devices: Mapping[str, GpuDevice], faults: Mapping[str, DeviceFault]) -> None:
        self.devices, self.faults = devices, faults

    def device_state(self) -> tuple[Mapping[str, GpuDevice], Mapping[str, DeviceFault]]:
        return self.devices, self.faults


class Annotated:
    """An attribution whose loads are given (telemetry.source.Attribution)."""

    def __init__(self, loads: Mapping[str, Load]) -> None:
        self.loads = dict(loads)

    def read(self, node: str) -> tuple[list[Use], dict[str, Load]]:
        assert node == "node"
        return [], self.loads


def test_the_plugins_loop_keeps_each_prepared_devices_state(tmp_path: Path) -> None:
    devices = node()
    uid = "5b0d8c1e-0000-4000-8000-00000000c1a1"
    nvmldata.write_claim_data(tmp_path, uid, [devices["gpu-1"], devices[MIG_1G]])
    faults = {MIG_1G: DeviceFault(xid=79), "gpu-1": DeviceFault(lost=True)}
    loads = {"gpu-1": Load(70, 30)}
    stop = threading.Event()
    loop = threading.Thread(
        target=run_live, args=(NodeState(devices, faults), Annotated(loads), LiveWriter(tmp_path), stop, 0.01)
    )
    loop.start()
    states = {n: nvmldata.live_dir(tmp_path, n) / nvmldata.LIVE_STATE for n in ("gpu-1", MIG_1G)}
    try:
        while not all(s.exists() for s in states.values()):
            assert loop.is_alive()
            stop.wait(0.01)
    finally:
        stop.set()
        loop.join()
    expected = node_live(devices, faults, loads)
    assert {n: s.read_text() for n, s in states.items()} == {n: expected[n] for n in states}
    assert "utilization_gpu=70\n" in expected["gpu-1"] and "lost=1\n" in expected["gpu-1"]
    assert "xid=79\n" in expected[MIG_1G]


def test_serve_with_the_library_starts_the_loop(tmp_path: Path) -> None:
    """`serve --nvml-library` without --telemetry-endpoint: the loop runs (its attribution finds no kubelet
    socket here, so the devices are idle) and writes the prepared device's state, its fault included."""
    devices = node()
    uid = "5b0d8c1e-0000-4000-8000-00000000c1a1"
    nvmldata.write_claim_data(tmp_path, uid, [devices["gpu-0"]])
    args = argparse.Namespace(telemetry_endpoint="", pod_resources_kubelet_socket=str(tmp_path / "none.sock"))
    stop = threading.Event()
    faults = {"gpu-0": DeviceFault(xid=79)}
    kube = SimpleNamespace(get=lambda path: pytest.fail(f"no use, no GET: {path}"))
    serve.start_telemetry(args, NodeState(devices, faults), kube, tmp_path, stop, nvml=True)  # type: ignore[arg-type]
    state = nvmldata.live_dir(tmp_path, "gpu-0") / nvmldata.LIVE_STATE
    try:
        while not state.exists():
            assert any(t.name == "nvml-live" for t in threading.enumerate())
            stop.wait(0.05)
    finally:
        stop.set()
    assert state.read_text() == node_live(devices, faults, {})["gpu-0"]
