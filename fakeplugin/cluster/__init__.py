"""A real local Kubernetes cluster for tests and demos: see fakeplugin.cluster.local.

cluster = Cluster.up(Path("examples/seed-lab.yaml"), state_dir, simulated_nodes=3)
cluster.kubectl("get", "nodes")
cluster.container_record("default", "pod", "ctr")   # what the fake CRI resolved
cluster.down()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fakeplugin.cluster.binaries import DEFAULT_STATE_DIR, BinaryNotFound
    from fakeplugin.cluster.components import DEFAULT_FEATURE_GATES, parse_feature_gates
    from fakeplugin.cluster.layout import KubeletDirs
    from fakeplugin.cluster.local import Cluster
    from fakeplugin.cluster.state import ClusterError, ClusterNode
    from fakeplugin.cluster.supervisor import ProcessStatus

# Loaded on first use: every command module imports fakeplugin.cluster.versions for its flags, and the
# plugin (`fakeplugin serve`) must not pay for the cluster's supervisor, components and state.
_EXPORTS = {
    "BinaryNotFound": "binaries",
    "DEFAULT_FEATURE_GATES": "components",
    "parse_feature_gates": "components",
    "KubeletDirs": "layout",
    "DEFAULT_STATE_DIR": "binaries",
    "Cluster": "local",
    "ClusterError": "state",
    "ClusterNode": "state",
    "ProcessStatus": "supervisor",
}

__all__ = [
    "DEFAULT_FEATURE_GATES",
    "DEFAULT_STATE_DIR",
    "BinaryNotFound",
    "Cluster",
    "ClusterError",
    "ClusterNode",
    "KubeletDirs",
    "ProcessStatus",
    "parse_feature_gates",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
