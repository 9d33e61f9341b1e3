"""Fixtures for tests on a real local cluster, built on our own pytest plugin (fakeplugin.testing).

`cluster` (session): the plugin's `fakeplugin_cluster` (a fakeplugin.testing.FakepluginCluster) started
with the seed lab of examples/seed-lab.yaml as the reference lab runs it: its two GPU nodes (real
kubelets, fake CRI, our plugin) labelled `nvidia.com/dra-kubelet-plugin=true`, plus three plain kwok-simulated
workers (our override of the plugin's `fakeplugin_inventory`). `namespace` (per test): the plugin's
`fakeplugin_namespace`, a fresh namespace deleted afterwards.

Missing binaries (hack/build-k8s.sh) or no root: skipped on a developer's machine, failed when CI=true.
What the tests share besides fixtures is in tests/harness: seedlab (this cluster), host, kube.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeplugin.testing import FakepluginCluster
from fakeplugin.testing.pytest_plugin import option
from tests.harness.host import HARD_CODED_HOST_PATHS, HostBefore, read_sysctls, require_cluster_host
from tests.harness.seedlab import seed_lab_cluster_inventory


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
