"""Fixtures for tests on a real local cluster, built on our own pytest plugin (fakeplugin.testing).

`cluster` (session): the plugin's `fakeplugin_cluster` (a fakeplugin.testing.FakepluginCluster) started
with the seed lab of examples/seed-lab.yaml as the reference lab runs it: its two GPU nodes (real
kubelets, fake CRI, our plugin) labelled `nvidia.com/dra-kubelet-plugin=true`, plus three plain kwok-simulated
workers (our override of the plugin's `fakeplugin_inventory`). `namespace` (per test): the plugin's
`fakeplugin_namespace`, a fresh namespace deleted afterwards.

Missing binaries (hack/build-k8s.sh) or no root: skipped on a developer's machine, failed when CI=true.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fakeplugin.cluster import BinaryNotFound, binaries, components
from fakeplugin.testing import FakepluginCluster
from fakeplugin.testing.pytest_plugin import option
from tests.e2e.kube import EXAMPLES
from tests.tooling import unavailable

GPU_NODE_LABELS = {"nvidia.com/dra-kubelet-plugin": "true"}  # as the lab labels GPU nodes
WORKERS = {f"worker-{i}": {"node-role.kubernetes.io/worker": ""} for i in (1, 2, 3)}
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


def seed_lab_cluster_inventory(path: Path) -> Path:
    """examples/seed-lab.yaml with the lab's GPU-node label and its three plain workers added."""
    inventory = yaml.safe_load((EXAMPLES / "seed-lab.yaml").read_text())
    for node in inventory["nodes"]:
        node["labels"] = {**node.get("labels", {}), **GPU_NODE_LABELS}
    inventory["nodes"] += [{"name": name, "labels": labels} for name, labels in WORKERS.items()]
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def host_before() -> HostBefore:
    return HostBefore(read_sysctls(), tuple(p for p in HARD_CODED_HOST_PATHS if not p.exists()))


@pytest.fixture(scope="session")
def fakeplugin_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seed_lab_cluster_inventory(tmp_path_factory.mktemp("inventory") / "seed-lab-cluster.yaml")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest, host_before: HostBefore) -> FakepluginCluster:
    if not option(request.config, "kubeconfig"):  # a cluster is started here: this host must run it
        require_cluster_host()
    return request.getfixturevalue("fakeplugin_cluster")


@pytest.fixture
def namespace(cluster: FakepluginCluster, fakeplugin_namespace: str) -> str:
    return fakeplugin_namespace
