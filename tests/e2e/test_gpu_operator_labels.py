"""End-to-end: the seed lab's nodes carry the labels NVIDIA's GPU Operator gives them (its default
ClusterPolicy mode: GPU Feature Discovery's and its own, docs/emulation.md), their plugins keep them
current when the inventory changes (serve --gpu-operator-labels), and so does the fleet on a simulated
node (fleet --gpu-operator-labels), a new MIG layout included; a workload written for a GPU Operator
cluster, selecting `nvidia.com/gpu.product`, runs on ours unchanged.

Runs on the session's seed-lab cluster (tests/e2e/conftest.py); the expected labels are written out by hand
from GFD's rules in tests/harness/seedlab.py (GPU_OPERATOR_LABELS). The inventory edit is undone at the end.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.testing import FakepluginCluster, claim_pod, device_request, resource_claim
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import (
    A5000,
    GPU_NODE_LABELS,
    GPU_OPERATOR_LABELS,
    T10,
    WITHIN,
    WORKERS,
    published,
    running,
    write_inventory,
)

pytestmark = pytest.mark.cluster

TIMESTAMP = "nvidia.com/gfd.timestamp"
SIMULATED = "worker-1"  # a kwok node of the lab; the fleet serves it


def nvidia_labels(cluster: Any, node: str) -> dict[str, str]:
    """The node's `nvidia.com/` labels but the lab's own GPU-node label."""
    labels = get(cluster, "node", node)["metadata"]["labels"]
    return {k: v for k, v in labels.items() if k.startswith("nvidia.com/") and k not in GPU_NODE_LABELS}


def owned(cluster: Any, node: str) -> set[str]:
    """The label keys the node's plugin says it keeps (serve --gpu-operator-labels)."""
    annotations = get(cluster, "node", node)["metadata"].get("annotations") or {}
    return set(filter(None, annotations.get("fakeplugin.dev/gpu-operator-labels", "").split(",")))


def test_each_gpu_node_has_gfds_and_the_operators_labels_and_a_plain_worker_none(cluster: Any) -> None:
    for node, expected in GPU_OPERATOR_LABELS.items():
        wait_for(lambda n=node: owned(cluster, n), what=f"{node}'s plugin keeping its labels", timeout=WITHIN)
        assert owned(cluster, node) == {*expected, TIMESTAMP}
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


@pytest.fixture
def inventory(cluster: FakepluginCluster) -> Iterator[dict[str, Any]]:
    """The session cluster's inventory as data; the file, the T10 node's labels and every node's slices
    restored afterwards (the next test of the session starts from the lab as it was)."""
    path, original, before = cluster.inventory, cluster.inventory.read_bytes(), published(cluster)
    try:
        yield yaml.safe_load(original)
    finally:
        write_atomic(path, original, mode=0o644)
        wait_for(
            lambda: nvidia_labels(cluster, T10).get("nvidia.com/gpu.count") == "2",
            what="the T10 node's labels of the original inventory",
            timeout=WITHIN,
        )
        wait_for(lambda: published(cluster) == before, what="the original slices again", timeout=WITHIN)
        wait_for(
            lambda: not nvidia_labels(cluster, SIMULATED),
            what=f"no GPU Operator label on {SIMULATED} again",
            timeout=WITHIN,
        )


def test_an_inventory_edit_relabels_the_node_and_leaves_a_users_label(
    cluster: Any, inventory: dict[str, Any]
) -> None:
    cluster.kubectl("label", "node", T10, "team=ml")
    try:
        t10 = next(n for n in inventory["nodes"] if n.get("name") == T10)
        t10["gpus"] = [{"profile": "t10", "count": 1}]
        write_inventory(cluster.inventory, inventory)
        wait_for(
            lambda: nvidia_labels(cluster, T10).get("nvidia.com/gpu.count") == "1",
            what="gpu.count=1 on the T10 node",
            timeout=WITHIN,
        )
        labels = get(cluster, "node", T10)["metadata"]["labels"]
        assert labels["team"] == "ml"  # a user's label: untouched
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-T10"
        # gpuOperator none: every label the plugin gave goes, the user's and the lab's stay.
        t10["gpuOperator"] = "none"
        write_inventory(cluster.inventory, inventory)
        wait_for(lambda: not nvidia_labels(cluster, T10), what="no GPU Operator label on T10", timeout=WITHIN)
        labels = get(cluster, "node", T10)["metadata"]["labels"]
        assert (labels["team"], labels["nvidia.com/dra-kubelet-plugin"]) == ("ml", "true")
    finally:
        cluster.kubectl("label", "node", T10, "team-")


def test_a_simulated_node_given_gpus_is_labelled_by_the_fleet_and_a_mig_layout_relabels_it(
    cluster: Any, inventory: dict[str, Any]
) -> None:
    """Expected values from GFD's rules by hand: an A100-SXM4-40GB is `NVIDIA-A100-SXM4-40GB`, 40960 MiB,
    compute 8.0 (ampere); cut into 1g.5gb under the default `single` strategy, `gpu.product` is
    `<model>-MIG-1g.5gb`, `gpu.count` the MIG devices (2 x 7), `gpu.memory` the profile's 4864 MiB, and
    the MIG manager's default `mig.config` goes (a layout is the user's)."""
    worker = next(n for n in inventory["nodes"] if n.get("name") == SIMULATED)
    worker["gpus"] = [{"profile": "a100-40gb", "count": 2}]
    worker["kubelet"] = False  # still kwok's: with GPUs an entry defaults to a kubelet node
    write_inventory(cluster.inventory, inventory)
    wait_for(lambda: owned(cluster, SIMULATED), what=f"the fleet labelling {SIMULATED}", timeout=WITHIN)
    labels = nvidia_labels(cluster, SIMULATED)
    assert {
        k: labels[f"nvidia.com/{k}"] for k in ("gpu.product", "gpu.count", "gpu.memory", "gpu.family")
    } == {
        "gpu.product": "NVIDIA-A100-SXM4-40GB",
        "gpu.count": "2",
        "gpu.memory": "40960",
        "gpu.family": "ampere",
    }
    assert (labels["nvidia.com/mig.capable"], labels["nvidia.com/mig.config"]) == ("true", "all-disabled")
    assert owned(cluster, SIMULATED) == set(labels)
    stamp = int(labels[TIMESTAMP])

    worker["gpus"][0]["mig"] = [{"profile": "1g.5gb", "count": 7}]
    write_inventory(cluster.inventory, inventory)
    wait_for(
        lambda: nvidia_labels(cluster, SIMULATED).get("nvidia.com/gpu.count") == "14",
        what=f"{SIMULATED} relabelled for its MIG layout",
        timeout=WITHIN,
    )
    labels = nvidia_labels(cluster, SIMULATED)
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.memory"]) == (
        "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "4864",
    )
    assert labels["nvidia.com/mig.strategy"] == "single" and "nvidia.com/mig.config" not in labels
    assert int(labels[TIMESTAMP]) >= stamp and owned(cluster, SIMULATED) == set(labels)
