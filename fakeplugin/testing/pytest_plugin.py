"""pytest plugin (entry point `pytest11: fakeplugin`): a cluster with our plugin for a test session.

Fixtures: `fakeplugin_cluster` (session; a fakeplugin.testing.FakepluginCluster), `fakeplugin_namespace`
(a fresh namespace per test, deleted after it), `fakeplugin_inventory` (session; the inventory a
started cluster gets: override it in a conftest to generate one). Nothing starts unless a test asks for
`fakeplugin_cluster`; this module imports nothing heavy before that.

Options (command line, or the ini key without `--` and with `_`):
  --fakeplugin-inventory FILE    inventory of the local cluster to start (default: the seed lab)
  --fakeplugin-kubeconfig FILE   attach to this running cluster instead; nothing is started or stopped
  --fakeplugin-state-dir DIR     where to start the local cluster (default: a session temp dir); with
                                 --fakeplugin-kubeconfig: a running local cluster's, for its records
  --fakeplugin-simulated-nodes N plain simulated (kwok) nodes besides the inventory's (default 0)
  --fakeplugin-plugin-args ARGS  extra `fakeplugin serve` flags for every node (e.g. --device-health)
  --fakeplugin-kubernetes-feature-gates G  Kubernetes' gates A=true,B=false over the local cluster's
                                 defaults
  --fakeplugin-kubernetes-version V  Kubernetes version of the local cluster to start, 1.34.x to 1.38.x
                                 (default: $FAKEPLUGIN_K8S_VERSION, else v1.37.2)
  --fakeplugin-with ADD-ONS      comma-separated: kueue[=CONFIG]: also run real Kueue against the started
                                 cluster (docs/kueue.md), CONFIG a Kueue Configuration (default:
                                 examples/kueue/config.yaml); prometheus[=RULES]: Prometheus scraping the
                                 plugins' telemetry (docs/prometheus.md)
"""

from __future__ import annotations

import shlex
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fakeplugin.testing.session import FakepluginCluster

OPTIONS = {
    "inventory": "inventory of the local cluster to start (default: the seed lab shipped in the package)",
    "kubeconfig": "attach to the running cluster of this kubeconfig instead of starting one",
    "state-dir": "state dir of the local cluster to start (default: a temp dir); when attaching: a local "
    "cluster's state dir, for container records and call logs",
    "simulated-nodes": "plain simulated (kwok) nodes besides the inventory's (default 0)",
    "plugin-args": "extra `fakeplugin serve` flags for every node's plugin, shell-quoted",
    "kubernetes-feature-gates": "Kubernetes feature gates A=true,B=false over the local cluster's defaults",
    "kubernetes-version": "Kubernetes version of the local cluster to start, 1.34.x to 1.38.x (default: "
    "$FAKEPLUGIN_K8S_VERSION, else v1.37.2)",
    "with": "comma-separated add-ons: kueue[=CONFIG]: also run real Kueue against the started cluster, "
    "CONFIG its Configuration (default: examples/kueue/config.yaml; docs/kueue.md); prometheus[=RULES]: "
    "Prometheus scraping the plugins' telemetry, RULES its rule files (default: examples/prometheus/; "
    "docs/prometheus.md)",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fakeplugin", "fakeplugin: a cluster with the fake gpu.nvidia.com DRA driver")
    for name, help_text in OPTIONS.items():
        group.addoption(f"--fakeplugin-{name}", dest=f"fakeplugin_{name.replace('-', '_')}", help=help_text)
        parser.addini(f"fakeplugin_{name.replace('-', '_')}", help_text)


def pytest_configure(config: pytest.Config) -> None:
    # SIGTERM (a CI job's timeout, `kill`) unwinds like Ctrl-C: the session's cluster goes down in its
    # fixture's teardown, instead of the process dying with it running. Only where nobody set a handler.
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) in (
        signal.SIG_DFL,
        None,
    ):
        signal.signal(signal.SIGTERM, _interrupted)


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"{signal.Signals(signum).name}: stopping (the session's cluster goes down)")


def option(config: pytest.Config, name: str) -> str:
    """A fakeplugin option: the command line's, else the ini file's, else ""."""
    key = f"fakeplugin_{name.replace('-', '_')}"
    return str(config.getoption(key) or config.getini(key) or "")


@pytest.fixture(scope="session")
def fakeplugin_inventory(pytestconfig: pytest.Config) -> Path:
    """The inventory a started local cluster gets."""
    from fakeplugin.testing.session import seed_lab_inventory

    value = option(pytestconfig, "inventory")
    return Path(value) if value else seed_lab_inventory()


@pytest.fixture(scope="session")
def fakeplugin_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, fakeplugin_inventory: Path
) -> Iterator[FakepluginCluster]:
    """The session's cluster: attached to (--fakeplugin-kubeconfig), else started (and stopped after)."""
    from fakeplugin.cluster import addons, karpenter, kueue, parse_feature_gates, prometheus, versions
    from fakeplugin.testing.session import FakepluginCluster

    config = request.config
    state_dir = option(config, "state-dir")
    kubeconfig = option(config, "kubeconfig")
    if kubeconfig:
        yield FakepluginCluster.attach(Path(kubeconfig), state_dir=Path(state_dir) if state_dir else None)
        return
    version = option(config, "kubernetes-version") or versions.selected()
    kueue_config = kueue.parse_with(option(config, "with"))
    rules = addons.parse_with(option(config, "with")).get(prometheus.NAME)
    nodepools = addons.parse_with(option(config, "with")).get(karpenter.NAME)
    cluster = FakepluginCluster.start(
        fakeplugin_inventory,
        Path(state_dir) if state_dir else tmp_path_factory.mktemp("fakeplugin") / "state",
        simulated_nodes=int(option(config, "simulated-nodes") or 0),
        plugin_args=shlex.split(option(config, "plugin-args")),
        feature_gates=parse_feature_gates(
            option(config, "kubernetes-feature-gates"), versions.release(version).feature_gates
        ),
        kubernetes_version=version,
        kueue=None if kueue_config is None else kueue.request(kueue_config),
        prometheus=None if rules is None else prometheus.request(rules),
        karpenter=None if nodepools is None else karpenter.request(nodepools),
    )
    with cluster:
        yield cluster


@pytest.fixture
def fakeplugin_namespace(fakeplugin_cluster: FakepluginCluster) -> Iterator[str]:
    """A fresh namespace for one test; deleted after it (without waiting)."""
    name = fakeplugin_cluster.create_namespace()
    yield name
    fakeplugin_cluster.delete_namespace(name)
