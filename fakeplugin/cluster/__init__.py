"""A real local Kubernetes cluster for tests and demos: see fakeplugin.cluster.local.

cluster = Cluster.up(Path("examples/seed-lab.yaml"), state_dir, simulated_nodes=3)
cluster.kubectl("get", "nodes")
cluster.container_record("default", "pod", "ctr")   # what the fake CRI resolved
cluster.down()
"""

from fakeplugin.cluster.binaries import BinaryNotFound
from fakeplugin.cluster.components import DEFAULT_FEATURE_GATES, parse_feature_gates
from fakeplugin.cluster.layout import NodeDirs
from fakeplugin.cluster.local import DEFAULT_STATE_DIR, Cluster
from fakeplugin.cluster.state import ClusterError, ClusterNode
from fakeplugin.cluster.supervisor import ProcessStatus

__all__ = [
    "DEFAULT_FEATURE_GATES",
    "DEFAULT_STATE_DIR",
    "BinaryNotFound",
    "Cluster",
    "ClusterError",
    "ClusterNode",
    "NodeDirs",
    "ProcessStatus",
    "parse_feature_gates",
]
