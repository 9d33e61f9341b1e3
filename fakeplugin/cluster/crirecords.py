"""What the containers of a local cluster got: the fake CRI's records (CDI resolved by the real CDI
library), and running a container's script as a workload there would see it. No real container exists."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from fakeplugin.cluster.layout import KubeletDirs
from fakeplugin.drivers.gpu import smi
from fakeplugin.fleet.records import record_name


def container_record(nodes: list[KubeletDirs], namespace: str, pod: str, container: str) -> dict[str, Any]:
    """The fake CRI's record of a container (the newest one if `nodes` hold several)."""
    name = record_name(namespace, pod, container)
    found = [p for p in (n.containers_dir / name for n in nodes) if p.exists()]
    if not found:
        dirs = ", ".join(str(n.containers_dir) for n in nodes) or "(no kubelet nodes)"
        raise FileNotFoundError(f"no fake CRI record {name} in {dirs}")
    return json.loads(max(found, key=lambda p: p.stat().st_mtime_ns).read_text())


def run_in_container_view(
    record: dict[str, Any], script: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run a shell script of the container's as a workload there would see it.

    The record is replayed under a temporary root, every mount copied to its container path, and `script`
    (a container path such as /usr/bin/nvidia-smi) runs there with /bin/sh and the container's env.
    """
    with tempfile.TemporaryDirectory(prefix="fpview-") as tmp:
        root = Path(tmp)
        for mount in record["mounts"]:
            source, target = Path(mount["source"]), root / mount["destination"].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        env = dict(item.split("=", 1) for item in record["env"])
        env.update({"PATH": "/usr/bin:/bin", smi.TEST_ROOT_ENV: str(root)})
        return subprocess.run(
            ["/bin/sh", str(root / script.lstrip("/")), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
