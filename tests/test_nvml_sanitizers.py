"""The mock NVML library's C under AddressSanitizer and UndefinedBehaviorSanitizer: a real description and
seeded random corruptions of it (bytes changed, cut, inserted; sections and huge numbers added), each read by
pynvml in a process with the sanitizers preloaded. Every run must end in a clean NVML answer: init
succeeds and every query answers, or init fails with DRIVER_NOT_LOADED; never a sanitizer report or a
crash. The same for corrupt live states (telemetry.nvmllive's), read by the calls that report them and the
event API: each answers an NVML code. It compiles a library of its own; about 6 s in all. Where the
compiler has no sanitizer runtimes it skips (fails with CI=true).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from fakeplugin import nvml
from fakeplugin.drivers.gpu.prepare import nvmldata
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.inventory import parse_inventory
from fakeplugin.nvml import build
from fakeplugin.telemetry.nvmllive import node_live
from tests.harness.nvml import PROBE
from tests.harness.tooling import unavailable

SANITIZERS = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g", "-O1")
INVENTORY = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: node
  gpus:
  - profile: a100-40gb
    count: 2
    mig:
    - {profile: 3g.20gb}
    - {profile: 1g.5gb, count: 2}
  - profile: h200
"""
INSERTS = (
    b"[gpu]\n",
    b"[mig]\n",
    b"[mig]\nname=a\nuuid=b\n",
    b"mig_mode=1\n",
    b"memory_total=18446744073709551616\n",
)


def runtime(name: str) -> str:
    path = subprocess.run(["cc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path):
        unavailable(f"the compiler has no {name} (the sanitizer runtimes; Debian: libasan, libubsan)")
    return path


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process whose `libnvidia-ml.so.1` is the library built with the sanitizers."""
    out = tmp_path_factory.mktemp("nvml-asan")
    stubs = out / "stubs.c"
    stubs.write_text(build.stubs_source(), encoding="utf-8")
    source = Path(build.__file__).parent
    library = out / build.LIBRARY_NAME
    sources = [str(source / c) for c in build.C_SOURCES]
    command = ["cc", *build.FLAGS, *SANITIZERS, f"-I{source}", "-o", str(library), *sources, str(stubs)]
    subprocess.run(command, check=True)
    return {
        **os.environ,
        "LD_LIBRARY_PATH": str(out),
        "LD_PRELOAD": f"{runtime('libasan.so')} {runtime('libubsan.so')}",
        "ASAN_OPTIONS": "detect_leaks=0",  # the Python interpreter's own, not ours
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }


def corrupted(good: bytes, rng: random.Random) -> bytes:
    data = bytearray(good)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(data))
        op = rng.random()
        if op < 0.4:
            data[at] = rng.randrange(256)
        elif op < 0.6:
            del data[at : at + rng.randint(1, 40)]
        elif op < 0.8:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        else:
            data[at:at] = rng.choice(INSERTS)
    return bytes(data)


def sanitized_probe(sanitized: dict[str, str], description: Path, *args: str) -> Any:
    """What the probe prints, run with the sanitized library on `description`: it must exit cleanly, and
    no sanitizer may report."""
    done = subprocess.run(
        [sys.executable, str(PROBE), *args],
        env={**sanitized, nvml.DESCRIPTION_ENV: str(description)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"{description}:\n{done.stderr}"
    assert "Sanitizer" not in done.stderr and "runtime error" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def test_corrupt_descriptions_under_sanitizers(sanitized: dict[str, str], tmp_path: Path) -> None:
    devices = node_devices(parse_inventory(yaml.safe_load(INVENTORY), "inv.yaml"), "node", {})
    files = {nvmldata.file_name(d.name): nvmldata.render_device(d).encode() for d in devices}
    rng = random.Random(44)
    answers = []
    for run in range(40):
        path = tmp_path / str(run)
        path.mkdir()
        for name, text in files.items():
            (path / name).write_bytes(text)
        if run:
            name = rng.choice(sorted(files))
            (path / name).write_bytes(corrupted(files[name], rng))
        seen = sanitized_probe(sanitized, path, *(["raw"] if run % 4 == 1 else []))
        answers.append(seen["init"])
        if run == 0:
            assert seen["count"] == 3
    assert answers[0] == pynvml.NVML_SUCCESS
    assert set(answers) <= {pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_DRIVER_NOT_LOADED}
    assert pynvml.NVML_ERROR_DRIVER_NOT_LOADED in answers


LIVE_INSERTS = (
    b"lost=1\n",
    b"xid=18446744073709551616\n",
    b"utilization_gpu=101\n",
    b"format=2\n",
    b"[gpu]\n",
)


def test_corrupt_live_states_under_sanitizers(sanitized: dict[str, str], tmp_path: Path) -> None:
    devices = {
        d.name: d for d in node_devices(parse_inventory(yaml.safe_load(INVENTORY), "inv.yaml"), "node", {})
    }
    states = {name: text.encode() for name, text in node_live(devices, {}, {}).items()}
    rng = random.Random(4444)
    answers: set[int] = set()
    for run in range(16):
        path = tmp_path / str(run)
        path.mkdir()
        for name, device in devices.items():
            (path / nvmldata.file_name(name)).write_text(nvmldata.render_device(device), encoding="utf-8")
            (path / f"{name}.live").mkdir()
            state = states[name]
            if run and rng.random() < 0.5:
                state = corrupted(state, rng) + (rng.choice(LIVE_INSERTS) if run % 2 else b"")
            (path / f"{name}.live" / nvmldata.LIVE_STATE).write_bytes(state)
        seen = sanitized_probe(sanitized, path, "live")
        assert seen["init"] == seen["set"] == seen["free"] == pynvml.NVML_SUCCESS
        assert seen["wait"] in {pynvml.NVML_ERROR_TIMEOUT, pynvml.NVML_ERROR_GPU_IS_LOST, pynvml.NVML_SUCCESS}
        answers |= set(seen["codes"])
        if run == 0:  # NOT_SUPPORTED: the power of a board whose profile knows no limit
            assert seen["codes"] == [pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED]
    assert pynvml.NVML_ERROR_UNKNOWN in answers  # some corruption was caught
    assert answers <= {
        pynvml.NVML_SUCCESS,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,  # the calls on the NULL handle of a failed lookup
        pynvml.NVML_ERROR_UNKNOWN,
        pynvml.NVML_ERROR_GPU_IS_LOST,
    }
