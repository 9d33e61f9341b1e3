"""The fake nvidia-smi replayed against a real one: every case of tests/data/nvidia-smi-h200/cases.txt (one
H200, driver 580.159.04, written by hack/capture-nvidia-smi.sh) runs against an H200 data file that carries
the captured GPU's identity, and must print the same lines (stdout and stderr merged, as captured) and exit
with the same code. Live readings are compared by shape (`LIVE_FIELDS`, `LIVE_KEYS`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.model import GpuDevice
from fakeplugin.profiles import load_profile
from tests.harness.smi_shells import SmiShell

CAPTURE = Path(__file__).resolve().parent / "data" / "nvidia-smi-h200" / "cases.txt"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    output: tuple[str, ...]
    rc: int


def load_cases(text: str) -> list[Case]:
    """`### nvidia-smi ARGS`, the output lines, `### rc=N` (then a blank line before the next case)."""
    cases: list[Case] = []
    args: tuple[str, ...] | None = None
    output: list[str] = []
    for line in text.splitlines():
        if line.startswith("### nvidia-smi"):
            args, output = tuple(shlex.split(line)[2:]), []
        elif line.startswith("### rc="):
            assert args is not None, line
            cases.append(Case(args, tuple(output), int(line.removeprefix("### rc="))))
            args = None
        elif args is not None:
            output.append(line)
    return cases


CASES = load_cases(CAPTURE.read_text())


def answer(field: str) -> str:
    """The captured GPU's value of one query field."""
    (case,) = [c for c in CASES if c.args == (f"--query-gpu={field}", "--format=csv,noheader,nounits")]
    return case.output[0]


# Live readings change from run to run and the fake simulates them, so they are compared by shape: digits
# become 9, an asctime stamp <time>. Everything else must be equal. CSV values by field, `-q` lines by key.
LIVE_FIELDS = {"timestamp", "temperature.gpu", "power.draw", "clocks.sm", "utilization.gpu"}
LIVE_FIELDS |= {"utilization.memory", "memory.used", "memory.free"}
LIVE_KEYS = {"Timestamp", "Used", "Free"}
ASCTIME = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}")
KEY_LINE = re.compile(r"( *)(\S.*?) +: (.*)")
# NVIDIA's help texts are not copied: of -h and --help-query-gpu, the first line and the field list count.
OWN_TEXT = {"-h", "--help-query-gpu"}
FIELD_LINE = re.compile(r'"[^"]+"( or "[^"]+")?')


def shape(value: str) -> str:
    return re.sub(r"\d", "9", ASCTIME.sub("<time>", value))


def comparable(args: tuple[str, ...], lines: tuple[str, ...] | list[str]) -> list[str]:
    if args[0] in OWN_TEXT:
        return [*lines[:1], *(line for line in lines if FIELD_LINE.fullmatch(line))]
    queries = [a.removeprefix("--query-gpu=") for a in args if a.startswith("--query-gpu=")]
    if queries:
        fields = queries[0].split(",")
        out = []
        for line in lines:
            values = line.split(", ")
            if len(values) == len(fields):
                values = [shape(v) if f in LIVE_FIELDS else v for f, v in zip(fields, values, strict=True)]
            out.append(", ".join(values))
        return out
    out = []
    for line in lines:
        m = KEY_LINE.fullmatch(line)
        out.append(line[: m.start(3)] + shape(m[3]) if m and m[2] in LIVE_KEYS else line)
    return out


CAPTURED_GPU = GpuDevice(
    name="gpu-0",
    type="gpu",
    minor=0,
    index=0,
    uuid=answer("uuid"),
    product_name=answer("name"),
    brand="Nvidia",
    architecture="Hopper",
    cuda_compute_capability=answer("compute_cap"),
    driver_version=answer("driver_version"),
    cuda_driver_version="13.0",  # the `-q` header
    memory_bytes=int(answer("memory.total")) * 1024 * 1024,
    pci_bus_id=answer("pci.bus_id").removeprefix("0000").lower(),
    pcie_root="pci0000:00",
    addressing_mode=answer("addressing_mode"),
    profile="h200",
    board=load_profile("h200").board(ecc=True, memory_bytes=int(answer("memory.total")) * 1024 * 1024),
)
# The captured board's values that no profile carries (the plugin writes N/A). The current SM clock is a
# live reading the fake has no simulation for; it is compared by shape like the others.
BOARD = {
    "serial": answer("serial"),
    "vbios_version": answer("vbios_version"),
    "clocks_max_sm_mhz": answer("clocks.max.sm"),
    "clocks_sm_mhz": answer("clocks.sm"),
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A container that got the captured GPU: the script, its program and the GPU's data file."""
    root = tmp_path_factory.mktemp("ctr")
    values = smi.gpu_values(CAPTURED_GPU)
    assert BOARD.keys() <= values.keys()  # the test replaces values the plugin writes, adds none
    data = root / smi.DATA_CONTAINER_DIR.lstrip("/") / smi.data_file_name(CAPTURED_GPU.name)
    data.parent.mkdir(parents=True)
    data.write_text("".join(f"{k}={v}\n" for k, v in (values | BOARD).items()))
    script = root / smi.SCRIPT_CONTAINER_PATH.lstrip("/")
    script.parent.mkdir(parents=True)
    script.write_text(smi.script_text())
    (root / smi.PROGRAM_CONTAINER_PATH.lstrip("/")).write_text(smi.program_text())
    return root


def test_every_captured_case_is_read() -> None:
    assert len(CASES) == CAPTURE.read_text().count("### nvidia-smi") > 100
    assert ("--query-gpu=clocks.sm", "--format=csv") in [c.args for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=lambda c: " ".join(c.args))
def test_the_fake_answers_as_the_captured_h200(smi_shell: SmiShell, root: Path, case: Case) -> None:
    result = subprocess.run(
        smi_shell.command(root, *case.args),
        env=smi_shell.env(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=30,
        check=False,
    )
    assert comparable(case.args, result.stdout.splitlines()) == comparable(case.args, case.output)
    assert result.returncode == case.rc


def test_live_readings_are_compared_by_shape_only() -> None:
    assert comparable(("--query-gpu=power.draw,name",), ["79.64 W, NVIDIA H200"]) == ["99.99 W, NVIDIA H200"]
    assert comparable(("--query-gpu=power.limit",), ["700.00 W"]) == ["700.00 W"]
    q_lines = ["Timestamp           : Mon Nov 30 06:29:30 2026", "        Used         : 616 MiB"]
    assert comparable(("-q",), q_lines) == ["Timestamp           : <time>", "        Used         : 999 MiB"]
    assert comparable(("-q",), ["        Total        : 616 MiB"]) == ["        Total        : 616 MiB"]
