"""What the containers of a local cluster got: the fake CRI's records (CDI resolved by the real CDI
library), running a container's script as a workload there would see it, and running a host command as
the container (its env, its NVML). No real container exists."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import subprocess
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin import nvml
from fakeplugin.cluster.layout import KubeletDirs
from fakeplugin.drivers.gpu import smi
from fakeplugin.fleet.records import record_name
from fakeplugin.nvml.build import LIBRARY_NAME

# The container's env that would not do on the host: the command is the host's program, found on the host's
# PATH and loaded by the host's dynamic loader (LD_LIBRARY_PATH is ours, below).
HOST_ONLY_ENV = ("PATH", "LD_LIBRARY_PATH")


def container_record(nodes: list[KubeletDirs], namespace: str, pod: str, container: str) -> dict[str, Any]:
    """The fake CRI's record of a container (the newest one if `nodes` hold several)."""
    name = record_name(namespace, pod, container)
    found = [p for p in (n.containers_dir / name for n in nodes) if p.exists()]
    if not found:
        dirs = ", ".join(str(n.containers_dir) for n in nodes) or "(no kubelet nodes)"
        raise FileNotFoundError(f"no fake CRI record {name} in {dirs}")
    return json.loads(max(found, key=lambda p: p.stat().st_mtime_ns).read_text())


def check_runnable(
    pod: Mapping[str, Any] | None, name: str, container: str, nodes: Collection[str], why: str = ""
) -> None:
    """LookupError, naming the pod `name` (namespace/pod) and the container, unless `pod` (its API
    object; None: not found, `why` kubectl's complaint) runs on one of this cluster's `nodes` (kubelet or
    simulated) and `container` is one of its containers: what run_as_container needs, before it reads the
    container's record (pure).
    A container without a claim is no error: it runs with no NVML, as a real one gets none."""
    if pod is None:
        raise LookupError(f"pod {name}: not found in this cluster" + (f" ({why})" if why else ""))
    node = (pod.get("spec") or {}).get("nodeName")
    if node not in nodes:
        where = f"on node {node}" if node else "not scheduled"
        raise LookupError(f"pod {name}: {where}, not a node of this cluster")
    phase = (pod.get("status") or {}).get("phase")
    if phase != "Running":
        raise LookupError(f"pod {name}: {phase or 'no phase'}, not running")
    containers = {c["name"]: c for c in (pod.get("spec") or {}).get("containers") or []}
    if container not in containers:
        raise LookupError(f"pod {name}: no container {container} (it has {', '.join(containers)})")


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


@dataclass(frozen=True)
class NvmlMounts:
    """What of a container's mounts NVML reads: the host path of the mock library (mounted where the
    container's loader finds `libnvidia-ml.so.1`; None: not mounted) and each description file's name in
    the description directory → its host path."""

    library: str | None = None
    descriptions: dict[str, str] = field(default_factory=dict)


def nvml_mounts(mounts: Iterable[Mapping[str, Any]]) -> NvmlMounts:
    """The NVML parts of a record's mounts (pure)."""
    library: str | None = None
    descriptions: dict[str, str] = {}
    for mount in mounts:
        destination, source = str(mount["destination"]), str(mount["source"])
        directory, name = posixpath.split(destination)
        if name == LIBRARY_NAME:
            library = library or source  # every library mount is the same file
        elif directory == nvml.DESCRIPTION_CONTAINER_DIR:
            descriptions[name] = source
    return NvmlMounts(library, descriptions)


def container_env(
    record: Mapping[str, Any], host: Mapping[str, str], library_dir: Path | None, description_dir: Path | None
) -> dict[str, str]:
    """The environment of a host command run as the container (pure): the host's, the container's on top
    but for HOST_ONLY_ENV; `LD_LIBRARY_PATH` starting at `library_dir` (the mounted NVML library's link) and
    `FAKEPLUGIN_NVML_DESCRIPTION` the directory of the mounted description files' links; where the container
    got no library, neither, and no description directory from the host either."""
    env = dict(host)
    env.update(
        (key, value)
        for key, value in (item.split("=", 1) for item in record.get("env") or [])
        if key not in HOST_ONLY_ENV
    )
    env.pop(nvml.DESCRIPTION_ENV, None)
    if library_dir is not None and description_dir is not None:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            filter(None, [str(library_dir), host.get("LD_LIBRARY_PATH")])
        )
        env[nvml.DESCRIPTION_ENV] = str(description_dir)
    return env


def run_as_container(
    record: Mapping[str, Any], argv: Sequence[str], *, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run a host command (e.g. the test's Python with pynvml) as the container of `record`: with its env
    (`container_env`) and its NVML, the mounted library and descriptions reached through links in a
    temporary directory (no chroot: the command sees the host's files, not the container's mounts).
    RuntimeError when the fake CRI refused to create the container (the record's error)."""
    if record.get("error"):  # CreateContainer failed: no such container ever ran
        who = f"{record.get('podNamespace')}/{record.get('podName')}/{record.get('container')}"
        raise RuntimeError(f"container {who} was not created: {record['error']}")
    found = nvml_mounts(record.get("mounts") or [])
    with tempfile.TemporaryDirectory(prefix="fpas-") as tmp:
        library_dir = description_dir = None
        if found.library is not None:
            library_dir, description_dir = Path(tmp) / "lib", Path(tmp) / "nvml"
            library_dir.mkdir()
            description_dir.mkdir()
            (library_dir / LIBRARY_NAME).symlink_to(found.library)
            for name, source in found.descriptions.items():
                (description_dir / name).symlink_to(source)
        env = container_env(record, os.environ, library_dir, description_dir)
        return subprocess.run(
            list(argv), env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
