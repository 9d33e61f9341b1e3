"""The fake nvidia-smi in a container's view, built from real CDI specs without a container runtime.

`write_claim` leaves on the host what the Preparer does for one claim (script and awk program, data
files, CDI spec); `container_view` copies the mounts of the injected CDI devices under a root, as a
runtime would mount them (`smi_only`: the fake nvidia-smi alone); `run_smi` / `smi_lines` run the script
there under one of the shell/awk pairs of tests.harness.smi_shells. `captured` reads the real nvidia-smi
output of the two-H200 host (tests/data/nvidia-smi-h200).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, smi
from fakeplugin.model import DeviceSettings, GpuDevice
from tests.harness import DRIVER
from tests.harness.smi_shells import SmiShell

CAPTURES = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi-h200"


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
    """Copy each mount's host file (container path → host path) to its container path under `root`."""
    for container_path, host_path in mounts.items():
        target = root / container_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
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
