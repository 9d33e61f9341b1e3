"""What this machine must have and lends a local cluster: tools, root, binaries, free loopback ports."""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from fakeplugin.cluster import binaries, components
from fakeplugin.cluster.components import Ports
from fakeplugin.cluster.layout import KubeletDirs, too_long_sockets
from fakeplugin.cluster.state import ClusterError

T = TypeVar("T")

log = logging.getLogger("fakeplugin.cluster")


def check_host(root: Path, kubelet_dirs: list[KubeletDirs]) -> None:
    """Refuse, saying what to change, when this machine cannot run the cluster in state dir `root`."""
    if not shutil.which("openssl"):
        raise ClusterError("openssl not found in PATH (it makes the service-account key pair)")
    if not kubelet_dirs:
        return
    if os.geteuid() != 0:
        raise ClusterError(
            "kubelet nodes need root (private mount namespaces, bind mounts); "
            "run as root or mark the nodes `kubelet: false` in the inventory"
        )
    for tool in ("unshare", "mount"):
        if not shutil.which(tool):
            raise ClusterError(f"{tool} not found in PATH (needed for kubelet nodes)")
    for hidden in (Path("/var/lib"), Path("/var/log")):
        if root.is_relative_to(hidden):
            raise ClusterError(
                f"state dir {root} is under {hidden}, which the kubelet sees "
                "replaced by a per-node dir; choose another --state-dir"
            )
    long = too_long_sockets(kubelet_dirs)
    if long:
        raise ClusterError(
            "unix socket paths would exceed 107 bytes; use a shorter --state-dir:\n  " + "\n  ".join(long)
        )


def found_or_built(
    what: str,
    find: Callable[[], T],
    build: bool,
    build_them: Callable[[], int],
    fetch: Callable[[], object] | None = None,
) -> T:
    """`find()`; when it raises BinaryNotFound, `fetch()` (the official releases, downloads.py) and
    `find()` again, then, when `build` is set, `build_them()` (hack/build-k8s.sh, its exit status) first,
    then `find()` again."""
    try:
        return find()
    except binaries.BinaryNotFound:
        if not build and fetch is None:
            raise
    if fetch is not None:
        fetch()
        try:
            return find()
        except binaries.BinaryNotFound:
            if not build:
                raise
    log.info("building %s with %s", what, binaries.BUILD_SCRIPT)
    if build_them() != 0:
        raise ClusterError(f"{binaries.BUILD_SCRIPT} failed building {what} (its output is above)") from None
    return find()


def find_binaries(build: bool, version: str) -> dict[str, Path]:
    """The cluster's binaries of Kubernetes `version`: missing ones whose official release upstream
    publishes with a checksum are downloaded (downloads.py; never with FAKEPLUGIN_OFFLINE=1), and with
    `build` the rest built (hack/build-k8s.sh)."""
    names = binaries.CLUSTER_BINARIES
    found = found_or_built(
        f"the binaries of {version}",
        lambda: binaries.find_all(names, version=version),
        build,
        lambda: binaries.build(list(names), version, download=False),  # fetched just before
        fetch=lambda: binaries.fetch(names, version=version),
    )
    for name, path in found.items():
        log.info("using %s: %s", name, path)
    return found


def allocate_ports(
    kubelet_nodes: list[str], extra: int = 0
) -> tuple[Ports, dict[str, dict[str, int]], list[int]]:
    """The control plane's ports, each kubelet node's {"kubelet", "healthz"} ports, and `extra` more (all
    distinct: taken at once)."""
    ports = free_ports(5 + 2 * len(kubelet_nodes) + extra)
    kubelets = {
        name: {"kubelet": ports[5 + 2 * i], "healthz": ports[6 + 2 * i]}
        for i, name in enumerate(kubelet_nodes)
    }
    return Ports(*ports[:5]), kubelets, ports[5 + 2 * len(kubelet_nodes) :]


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all bound at once, then released for the components to take)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind((components.LOOPBACK, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
