"""What a local cluster (fakeplugin.cluster) needs of this host, and what it must leave alone there."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import (
    BinaryNotFound,
    Cluster,
    binaries,
    components,
    karpenter,
    keda,
    kueue,
    prometheus,
)
from fakeplugin.cluster.karpenter import KarpenterRequest
from fakeplugin.cluster.keda import KedaRequest
from fakeplugin.cluster.kueue import KueueRequest
from fakeplugin.cluster.prometheus import PrometheusRequest
from tests.harness.tooling import unavailable

# Paths a kubelet (or kube-controller-manager) creates on a host unless kept away from them.
HARD_CODED_HOST_PATHS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/containers"),
    Path("/usr/libexec/kubernetes"),
)


def require_cluster_host(names: tuple[str, ...] = binaries.CLUSTER_BINARIES) -> dict[str, Path]:
    """The binaries, or skip (fail in CI) saying what is missing; kubelets also need root."""
    try:
        found = binaries.find_all(names)
    except BinaryNotFound as exc:
        unavailable(str(exc))
    if "kubelet" in names and os.geteuid() != 0:
        unavailable("kubelet nodes need root (private mount namespace, bind mounts)")
    return found


def read_sysctls() -> dict[str, str]:
    return {f: Path("/proc/sys", f).read_text().strip() for f in components.KUBELET_SYSCTLS}


@dataclass(frozen=True)
class HostBefore:
    """The host as it was before any kubelet of the session ran."""

    sysctls: dict[str, str]
    absent_paths: tuple[Path, ...]


def require_kueue(config: str = "") -> KueueRequest:
    """What `cluster up --with kueue[=config]` needs, checked; skip (fail in CI) when Kueue is not built."""
    try:
        return kueue.request(config)
    except BinaryNotFound as exc:
        unavailable(str(exc))


def require_prometheus(rules: str = "") -> PrometheusRequest:
    """What `cluster up --with prometheus[=rules]` needs, checked; skip (fail in CI) without Debian's
    prometheus and promtool."""
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        unavailable(f"prometheus and promtool not found in PATH; {prometheus.INSTALL}")
    return prometheus.request(rules)


def require_karpenter(nodepools: str = "") -> KarpenterRequest:
    """Karpenter's kwok provider with GPU instance types; skip (fail in CI) when it is not built."""
    try:
        return karpenter.request(nodepools)
    except BinaryNotFound as exc:
        unavailable(str(exc))


def require_keda() -> KedaRequest:
    """KEDA's operator and metrics API server; skip (fail in CI) when they are not built."""
    try:
        return keda.request()
    except BinaryNotFound as exc:
        unavailable(str(exc))


@contextlib.contextmanager
def own_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    inventory: Mapping[str, Any],
    namespace: str,
    **up: Any,
) -> Iterator[Cluster]:
    """A module's local cluster of its own: `inventory` written to a file, `namespace` created; down after.
    `up`: more of Cluster.up's arguments (plugin_args, kueue, ...).

    The state dir is a short one directly in /tmp, removed after: the kubelets' unix sockets live below it
    (at most 107 bytes), and pytest's own temp dirs grow with every run on a machine (pytest-of-<user>/
    pytest-<n>: one more digit at the 100th)."""
    require_cluster_host()
    path = tmp_path_factory.mktemp(name) / f"{name}.yaml"
    path.write_text(yaml.safe_dump(dict(inventory), sort_keys=False))
    state = Path(tempfile.mkdtemp(prefix="fp-", dir="/tmp"))
    cluster = Cluster.up(path, state, watchdog=True, **up)
    try:
        cluster.kubectl("create", "namespace", namespace)
        yield cluster
    finally:
        cluster.down(purge=True)
        shutil.rmtree(state, ignore_errors=True)
