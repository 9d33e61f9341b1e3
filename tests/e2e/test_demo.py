"""`fakeplugin demo`, the README's main command, run as a user runs it, its Kueue step included."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness.host import require_cluster_host, require_kueue

pytestmark = pytest.mark.cluster


def test_demo_runs_the_seed_lab_and_cleans_up():
    require_cluster_host()
    require_kueue()
    with tempfile.TemporaryDirectory(prefix="fpdemo-", dir="/tmp") as short:  # unix socket paths are short
        check_demo(Path(short) / "demo")


def check_demo(state: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "demo", "--state-dir", str(state), "--with", "kueue"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for cls in ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"):
        assert re.search(rf"^{re.escape(cls)}\s", text, re.M), cls
    assert re.search(
        r"capi-dralabs-md-gpua5000-jw4mx-d64jz\s+gpu-0\s+NVIDIA RTX A5000\s+23028Mi\s+GPU-", text
    )
    assert len(re.findall(r"capi-dralabs-md-gput10-gzl84-f2m2d\s+gpu-\d\s+NVIDIA T10\s+15Gi", text)) == 2
    assert "1 pod(s) Running: shared-gpu" in text
    assert text.count("allocated,reserved") == 3
    # Both containers of Scenario I got the same CDI device, the same GPU, and nvidia-smi shows it.
    blocks = re.findall(
        r"shared-gpu/ctr\d on \S+\n  CDI devices: +(\S+)\n  GPUs in its env: +gpu-\d=(\S+)\n"
        r"  \$ nvidia-smi -L +(GPU 0: NVIDIA .+ \(UUID: (\S+)\))\n",
        text,
    )
    assert len(blocks) == 2 and blocks[0] == blocks[1], text
    _, visible, _, smi_uuid = blocks[0]
    assert visible.startswith("GPU-") and smi_uuid == visible
    # Kueue admitted the queued Job (charged to the DeviceClass mapped to nvidia.com/gpu) and its pod ran.
    assert re.search(r"^1 pod\(s\) Running: legacy-gpu-", text, re.M), text
    assert re.search(r"^workload\.kueue\.x-k8s\.io/job-legacy-gpu-\S+\s+gpus\s+gpus\s+True\s", text, re.M), (
        text
    )
    assert "is down" in out.stderr
    assert not (state / "cluster.json").exists()
