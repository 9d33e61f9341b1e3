"""End-to-end: the seed lab's nodes carry the labels NVIDIA's GPU Operator gives them (its default
ClusterPolicy mode: GPU Feature Discovery's and its own, docs/emulation.md), and a workload written for a
GPU Operator cluster, selecting `nvidia.com/gpu.product`, runs on ours unchanged.

Runs on the session's seed-lab cluster (tests/e2e/conftest.py); the expected labels are written out by hand
from GFD's rules in tests/harness/seedlab.py (GPU_OPERATOR_LABELS).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from fakeplugin.testing import claim_pod, device_request, resource_claim
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import A5000, GPU_NODE_LABELS, GPU_OPERATOR_LABELS, WORKERS, running

pytestmark = pytest.mark.cluster

TIMESTAMP = "nvidia.com/gfd.timestamp"


def nvidia_labels(cluster: Any, node: str) -> dict[str, str]:
    """The node's `nvidia.com/` labels but the lab's own GPU-node label."""
    labels = get(cluster, "node", node)["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/") and k not in GPU_NODE_LABELS}


def test_each_gpu_node_has_gfds_and_the_operators_labels_and_a_plain_worker_none(cluster: Any) -> None:
    for node, expected in GPU_OPERATOR_LABELS.items():
        labels = nvidia_labels(cluster, node)
        stamp = labels.pop(TIMESTAMP, "")
        assert labels == expected, node
        # GFD's timestamp: seconds since the epoch, when the cluster labelled the node (before now).
        assert stamp.isdigit() and time.time() - 86400 < int(stamp) <= time.time(), (node, stamp)
    for worker in WORKERS:
        assert nvidia_labels(cluster, worker) == {}, worker


def test_a_pod_selecting_the_a5000_by_its_product_label_runs_there(cluster: Any, namespace: str) -> None:
    # As a workload chart written for a GPU Operator cluster asks: a nodeSelector on GFD's product label,
    # and any one GPU of the driver's class.
    pod = claim_pod("on-a5000", {"resourceClaimName": "any-gpu"})
    pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-RTX-A5000"}
    apply(cluster, namespace, resource_claim("any-gpu", device_request()), pod)
    wait_for(lambda: running(cluster, namespace, "on-a5000"), what="the pod Running on the A5000 node")
    assert get(cluster, "pod", "on-a5000", "-n", namespace)["spec"]["nodeName"] == A5000
