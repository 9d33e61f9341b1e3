"""NVML's live values in the claims' containers: the load model's readings and the faults of each prepared
device, written where the mock NVML library (fakeplugin/nvml) reads them on every call.

One source of truth: the values are the ones the DCGM series show for the same state (samples:
`temperature_c`, `power_watts`, `framebuffer_mib`, `physical_loads`), so NVML, `/metrics` and the load
annotation agree (tests/test_nvml_live.py holds them equal). Per device, `render_live` (pure) gives the
`key=value` text of its state file (nvml/description.c `live_read`); `LiveWriter` writes it into the live
directory Prepare made for each device it described (drivers.gpu.prepare.nvmldata `live_dir`, mounted into
its claims' containers), renamed into place so a reader sees a whole state, and only when it changed.
`run_live` does that every PERIOD_SECONDS while a node has such directories: XIDs and gpu-lost from the
device-faults annotation reach NVML (and its event API) within seconds.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from fakeplugin.atomicfile import write_atomic
from fakeplugin.drivers.gpu import nvmldata
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.model import GpuDevice
from fakeplugin.telemetry import samples
from fakeplugin.telemetry.load import IDLE, Load
from fakeplugin.telemetry.source import Attribution, NodeView

log = logging.getLogger(__name__)

PERIOD_SECONDS = 2.0  # each round GETs the claims and pods the kubelet lists (their load annotations)
_MIB = 1024 * 1024
_NO_FAULT = DeviceFault()


def render_live(device: GpuDevice, own: Load, gpu: Load, fault: DeviceFault, gpu_fault: DeviceFault) -> str:
    """The live state of `device` (a GPU or a MIG device): `own` its load, `gpu` its physical GPU's (the
    same for a GPU), `fault` its own, `gpu_fault` its GPU's (a MIG device reports its GPU lost, and its
    GPU's XID when it has none of its own)."""
    instance = device.mig is not None
    used_mib, _, _ = samples.framebuffer_mib(device, own, gpu_instance=instance)
    watts = samples.power_watts(device, gpu)
    utilization = gpu.utilization if instance else own.utilization
    xid = fault.xid if fault.xid is not None else gpu_fault.xid
    values = {
        "format": nvmldata.FORMAT,
        "utilization_gpu": utilization,
        "utilization_memory": round(utilization * samples.MEM_COPY_SHARE),
        "memory_used": used_mib * _MIB,
        "temperature_c": samples.temperature_c(gpu),
        "power_usage_mw": 0 if watts is None else round(watts * 1000),
        "xid": xid or 0,
        "lost": int(fault.lost or gpu_fault.lost),
    }
    return "".join(f"{key}={value}\n" for key, value in values.items())


def node_live(
    devices: Mapping[str, GpuDevice], faults: Mapping[str, DeviceFault], loads: Mapping[str, Load]
) -> dict[str, str]:
    """Every device's live state text by name, for one node's state (pure)."""
    listed = list(devices.values())
    folded = samples.folded_loads(listed, loads)
    physical = samples.physical_loads(listed, folded)
    gpus = {d.index: d.name for d in listed if d.type == "gpu"}
    out: dict[str, str] = {}
    for name, device in devices.items():
        gpu_name = gpus.get(device.index, name)
        out[name] = render_live(
            device,
            folded.get(name, IDLE),
            physical.get(device.index, IDLE),
            faults.get(name, _NO_FAULT),
            faults.get(gpu_name, _NO_FAULT) if gpu_name != name else _NO_FAULT,
        )
    return out


class LiveWriter:
    """Writes the states into the devices' live directories under `plugin_dir`."""

    def __init__(self, plugin_dir: Path) -> None:
        self._root = nvmldata.live_root(plugin_dir)
        self._written: dict[str, str] = {}  # device name → the text last written for it

    def devices(self) -> list[str]:
        """The devices that have a live directory (Prepare made one for each device it described)."""
        try:
            return sorted(os.listdir(self._root))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def write(self, texts: Mapping[str, str], devices: list[str]) -> None:
        """Each of `devices`' text where it changed (a device gone from the node: none)."""
        for device in devices:
            text = texts.get(device)
            if text is not None and self._written.get(device) != text:
                state = self._root / device / nvmldata.LIVE_STATE
                write_atomic(state, text.encode(), mode=nvmldata.DATA_MODE, sync=False)
                self._written[device] = text


def run_live(
    view: NodeView,
    attribution: Attribution | None,
    writer: LiveWriter,
    stop: threading.Event,
    period: float = PERIOD_SECONDS,
) -> None:
    """Keep `view`'s node's live states current until `stop`, a round at once and then every `period`;
    loads from `attribution` (None: idle)."""
    while True:
        try:
            described = writer.devices()
            if described:
                devices, faults = view.device_state()
                loads = attribution.read(view.node_name)[1] if attribution is not None else {}
                writer.write(node_live(devices, faults, loads), described)
        except Exception:  # a bad round (API server away, disk full) must not end the loop
            log.exception("NVML live values of node %s", view.node_name)
        if stop.wait(period):
            return


def start_live(
    view: NodeView, attribution: Attribution | None, plugin_dir: Path, stop: threading.Event
) -> threading.Thread:
    """`run_live` in a daemon thread."""
    thread = threading.Thread(
        target=run_live, args=(view, attribution, LiveWriter(plugin_dir), stop), name="nvml-live", daemon=True
    )
    thread.start()
    return thread
