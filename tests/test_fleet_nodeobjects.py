"""The Node objects a fleet makes when it owns them (fakeplugin.fleet.nodeobjects, pure parts): which
nodes, with which labels, and the patch that follows an inventory change."""

from __future__ import annotations

from pathlib import Path

import yaml

from fakeplugin.fleet.nodeobjects import LABEL_KEYS, OWNER_LABEL, label_patch, simulated_node, simulated_nodes
from fakeplugin.fleet.shard import Shard
from fakeplugin.fleet.stages import KWOK_ANNOTATION
from fakeplugin.inventory import Inventory, load_inventory

INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "gpuOperator": "none",  # the inventory's labels alone (the operator's: tests/test_nodelabels.py)
    "nodes": [
        {"name": "real-0", "gpus": [{"profile": "t10", "count": 1}]},  # a kubelet node: not the fleet's
        {"selector": {"matchLabels": {"pool": "a"}}, "gpus": [{"profile": "t10", "count": 1}]},
        {
            "name": "lone",
            "kubelet": False,
            "labels": {"zone": "z1"},
            "gpus": [{"profile": "h100-80gb-hbm3", "count": 8}],
        },
        {"namePrefix": "h200-", "replicas": 3, "kubelet": False, "gpus": [{"profile": "h200", "count": 8}]},
    ],
}


def inventory(tmp_path: Path, doc: dict) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_inventory(path)


def test_the_simulated_nodes_are_the_named_kubelet_false_ones(tmp_path: Path) -> None:
    nodes = simulated_nodes(inventory(tmp_path, INVENTORY))
    assert nodes == {"lone": {"zone": "z1"}, "h200-0": {}, "h200-1": {}, "h200-2": {}}


def test_each_shard_gets_its_own_and_all_together_get_every_node(tmp_path: Path) -> None:
    inv = inventory(tmp_path, INVENTORY)
    shards = [set(simulated_nodes(inv, Shard(i, 3).owns)) for i in range(3)]
    assert set().union(*shards) == set(simulated_nodes(inv))
    assert sum(len(s) for s in shards) == 4  # none twice


def test_a_fabric_gives_the_clique_label(tmp_path: Path) -> None:
    doc = yaml.safe_load(Path("examples/gb200-nvl72.yaml").read_text())
    nodes = simulated_nodes(inventory(tmp_path, doc))
    assert nodes and all("nvidia.com/gpu.clique" in labels for labels in nodes.values())


def test_a_node_object_is_kwoks_with_the_owner_reference() -> None:
    ref = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "name": "r", "uid": "u"}
    node = simulated_node("n1", {"zone": "z1"}, annotations={LABEL_KEYS: "zone"}, owner_ref=ref)
    meta = node["metadata"]
    assert meta["annotations"] == {KWOK_ANNOTATION: "fake", LABEL_KEYS: "zone"}
    assert meta["labels"]["zone"] == "z1" and meta["labels"]["kubernetes.io/hostname"] == "n1"
    assert meta["ownerReferences"] == [ref]
    assert node["status"]["allocatable"]["pods"] == "110"
    assert "ownerReferences" not in simulated_node("n1", {})["metadata"]


def meta(labels: dict[str, str], keys: str) -> dict:
    return {"labels": labels, "annotations": {LABEL_KEYS: keys}}


def test_no_patch_when_the_node_has_what_the_inventory_says() -> None:
    have = meta({"zone": "z1", OWNER_LABEL: "f", "kubernetes.io/hostname": "n"}, "zone")
    assert label_patch(have, {"zone": "z1"}, "f") is None


def test_a_changed_label_is_set_and_a_dropped_one_removed_and_others_stay() -> None:
    have = meta({"zone": "z1", "rack": "r1", "mine": "x", OWNER_LABEL: "f"}, "rack,zone")
    patch = label_patch(have, {"zone": "z2"}, "f")
    assert patch == {
        "metadata": {"labels": {"zone": "z2", "rack": None}, "annotations": {LABEL_KEYS: "zone"}}
    }


def test_a_node_without_the_keys_annotation_gets_it() -> None:
    patch = label_patch({"labels": {"zone": "z1", OWNER_LABEL: "f"}}, {"zone": "z1"}, "f")
    assert patch == {"metadata": {"labels": {}, "annotations": {LABEL_KEYS: "zone"}}}
