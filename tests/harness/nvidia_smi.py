"""The fake nvidia-smi in a container's view, built from real CDI specs without a container runtime.

`write_claim` leaves on the host what the Preparer does for one claim (script and awk program, data
files, CDI spec); `container_view` copies the mounts of the injected CDI devices under a root, as a
runtime would mount them (`smi_only`: the fake nvidia-smi alone); `run_smi` / `smi_lines` run the script
there under one of the shell/awk pairs of tests.harness.smi_shells. `captured` reads the real nvidia-smi
output of the two-H200 host (tests/data/nvidia-smi-h200); `h200` is one of its GPUs as our inventory would
describe it, `two_h200_view` a container given both (the `h200_host` fixture of tests/test_nvidia_smi*.py);
`parse_q` reads a `-q` report as (section path + key, value) parts.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, smi
from fakeplugin.model import DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.factories import H200, numbered
from tests.harness.smi_shells import SmiShell

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi-h200"
UUID_A = "0a000000-aaaa-4bbb-8ccc-dddddddddddd"
UUID_B = "0b000000-aaaa-4bbb-8ccc-dddddddddddd"
TIMESTAMP = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ 1-3]\d \d\d:\d\d:\d\d \d{4}")


def captured(section: str) -> list[str]:
    """The lines of one `### <section>` of smi_text.txt, without the `rc=N` line."""
    lines = (CAPTURES / "smi_text.txt").read_text().splitlines()
    start = lines.index(f"### {section}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("### ")), len(lines))
    return [line for line in lines[start:end] if not line.startswith("rc=")]


def write_claim(
    plugin_dir: Path,
    cdi_root: Path,
    claim_uid: str,
    devices: Sequence[GpuDevice],
    settings: Mapping[str, DeviceSettings] | None = None,
) -> Path:
    """What the Preparer leaves on the host for one claim: script and program, data files, CDI spec;
    `settings`: what the claim's opaque configs applied, per device name."""
    smi.install_program(plugin_dir)
    smi.install_script(plugin_dir)
    smi.write_claim_data(plugin_dir, claim_uid, devices, settings or {})
    spec = cdispec.claim_spec(
        claim_uid, devices, driver_name=DRIVER, plugin_dir=plugin_dir, settings=settings
    )
    cdi_root.mkdir(parents=True, exist_ok=True)
    path = cdi.spec_path(cdi_root, claim_uid, driver_name=DRIVER)
    cdi.write_spec(path, spec)
    return path


def container_view(root: Path, injected: Sequence[tuple[Path, Sequence[str]]]) -> Path:
    """Apply the mounts of the injected CDI devices ((spec file, pool device names)) under `root`, as a
    runtime would: each spec's own edits once, then each device's; a later mount of a path replaces it."""
    mounts: dict[str, str] = {}
    for spec_file, names in injected:
        spec = yaml.safe_load(spec_file.read_text())
        edits = [spec["containerEdits"]]
        edits += [d["containerEdits"] for d in spec["devices"] if d["name"].split("-", 5)[5] in names]
        for edit in edits:
            for mount in edit.get("mounts", []):
                assert mount["options"] == ["ro", "nosuid", "nodev", "rbind", "rprivate"]
                mounts[mount["containerPath"]] = mount["hostPath"]
    return copy_mounts(root, mounts)


def copy_mounts(root: Path, mounts: Mapping[str, str]) -> Path:
    """Copy each mount's host file or directory (container path → host path) to its container path under
    `root`."""
    for container_path, host_path in mounts.items():
        target = root / container_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(host_path).is_dir():
            shutil.copytree(host_path, target, dirs_exist_ok=True)
        else:
            shutil.copy2(host_path, target)
    return root


def smi_only(tmp_path: Path) -> Path:
    """A container with the fake nvidia-smi (script and program, mounted as a spec mounts them) and no GPU
    data directory."""
    plugin = tmp_path / "plugin"
    smi.install_program(plugin)
    smi.install_script(plugin)
    mounts = {m["containerPath"]: m["hostPath"] for m in smi.spec_mounts(plugin)}
    return copy_mounts(tmp_path / "ctr", mounts)


def run_smi(shell: SmiShell, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shell.command(root, *args),
        env=shell.env(root),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def smi_lines(shell: SmiShell, root: Path, *args: str) -> list[str]:
    result = run_smi(shell, root, *args)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    return result.stdout.splitlines()


def h200(minor: int) -> GpuDevice:
    """One of the captured host's GPUs, as our inventory would describe it."""
    uuid = ("GPU-bd363601-0402-2785-a79b-f013317dbdce", "GPU-7d2eb26e-1642-6cd7-308d-39b5bece4cd3")[minor]
    return numbered(H200, minor, uuid=uuid, pci_bus_id=f"0000:00:0{6 + minor}.0")


def two_h200_view(tmp_path: Path) -> Path:
    """A container that got both H200s of the captured host through one claim (devices listed minor 1
    first, so enumeration order cannot come from allocation order)."""
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, [h200(1), h200(0)])
    return container_view(tmp_path / "ctr", [(spec, ["gpu-1", "gpu-0"])])


Q = list[tuple[tuple[str, ...], str | None]]


def parse_q(lines: Sequence[str]) -> list[Q]:
    """`-q` lines as (section path + key, value), split at each `GPU <bus id>` line (the first part is the
    report's header); checks the key column (54) on the way."""
    parts: list[Q] = [[]]
    path: list[str] = []
    for line in lines:
        if not line.strip() or line.startswith("="):
            continue
        if line.startswith("GPU "):
            parts.append([(("GPU",), line[4:])])
            path = ["GPU"]
            continue
        level = (len(line) - len(line.lstrip(" "))) // 4
        key, sep, value = line.strip().partition(" : ")
        if sep:
            assert line.index(" : ") == 54, line
        del path[level:]  # a GPU's keys are at level 1, under path[0] == "GPU"
        parts[-1].append(((*path, key.rstrip()), value if sep else None))
        if not sep:
            path.append(key.rstrip())
    return parts
