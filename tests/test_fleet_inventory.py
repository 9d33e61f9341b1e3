"""Compact fleet inventories: one `namePrefix` entry stands for `replicas` nodes (inventory.nodes), and
every consumer (render, validate, the local cluster, NodeDevices) sees them as if each had its own `name`
entry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster.state import cluster_nodes
from fakeplugin.commands.validate import device_problems, summary
from fakeplugin.drivers.gpu.publish.node import NodeDevices, node_slices
from fakeplugin.inventory import InventoryError, parse_inventory
from fakeplugin.render import render_documents

H100 = {"profile": "h100-80gb-hbm3", "count": 8}
FIXED_UUID = "GPU-00000000-1111-2222-3333-444444444444"


def fleet(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": list(nodes)}


def problems(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        parse_inventory(doc, source="inv.yaml")
    return exc.value.problems


def test_a_prefix_entry_names_exactly_its_replicas() -> None:
    inv = parse_inventory(
        fleet({"namePrefix": "h100-", "replicas": 200, "kubelet": False, "gpus": [H100]}, {"name": "cpu-0"})
    )
    entry = inv.nodes[0]
    assert entry.node_names()[:2] == ["h100-0", "h100-1"] and entry.node_names()[-1] == "h100-199"
    assert inv.node_entry("h100-0") is entry and inv.node_entry("h100-199") is entry
    for other in ("h100-200", "h100-07", "h100-", "h100-x", "h100-1a", "h100-٣"):
        assert inv.node_entry(other) is None, other
    assert inv.node_entry("cpu-0") is inv.nodes[1]


def test_generated_nodes_publish_what_a_name_entry_would() -> None:
    by_prefix = parse_inventory(fleet({"namePrefix": "h100-", "replicas": 3, "gpus": [H100]}))
    by_name = parse_inventory(fleet({"name": "h100-2", "gpus": [H100]}))
    assert node_slices(by_prefix, "h100-2", node_uid="u", driver="gpu.nvidia.com") == node_slices(
        by_name, "h100-2", node_uid="u", driver="gpu.nvidia.com"
    )
    uuids = {
        d["attributes"]["uuid"]["string"]
        for doc in render_documents(by_prefix)
        if doc["kind"] == "ResourceSlice"
        for d in doc["spec"]["devices"]
    }
    assert len(uuids) == 3 * 8  # each node's own identities
    assert [d["spec"]["nodeName"] for d in render_documents(by_prefix) if d["kind"] == "ResourceSlice"] == [
        "h100-0",
        "h100-1",
        "h100-2",
    ]


def test_validate_and_the_local_cluster_count_every_generated_node() -> None:
    inv = parse_inventory(
        fleet(
            {"name": "lab", "gpus": [{"profile": "t10", "count": 2}]},
            {"namePrefix": "h100-", "replicas": 50, "kubelet": False, "gpus": [H100]},
            {"namePrefix": "cpu-", "replicas": 3, "labels": {"role": "cpu"}},
        ),
        source="fleet.yaml",
    )
    assert device_problems(inv) == []
    assert summary(inv) == (
        "fleet.yaml: valid: 54 nodes, 402 GPUs on 51 nodes (driver 580.126.20, CUDA 13.0)"
    )
    nodes = cluster_nodes(inv, simulated_nodes=1)
    assert [n.name for n in nodes][:3] == ["lab", "h100-0", "h100-1"]
    assert len(nodes) == 1 + 50 + 3 + 1
    assert {n.name: (n.kubelet, n.gpus, n.labels) for n in nodes}["cpu-2"] == (False, 0, {"role": "cpu"})


def test_a_plugin_on_a_generated_node_finds_its_entry_without_labels(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(fleet({"namePrefix": "h100-", "replicas": 4, "gpus": [H100]})))
    devices = NodeDevices(path, "h100-3", driver="gpu.nvidia.com")
    assert sorted(devices) == [f"gpu-{i}" for i in range(8)]


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        (
            {"name": "a", "namePrefix": "a-"},
            "inv.yaml: nodes[0]: needs exactly one of name (one node), namePrefix (many), selector",
        ),
        ({"name": "a", "replicas": 2}, "inv.yaml: nodes[0].replicas: goes with namePrefix"),
        ({"namePrefix": "a-", "replicas": 0}, "inv.yaml: nodes[0].replicas: must be at least 1, got 0"),
        (
            {"namePrefix": "a-", "replicas": 5001},
            "inv.yaml: nodes[0].replicas: must be at most 5000 (Kubernetes' largest cluster), got 5001",
        ),
        (
            {"namePrefix": "GPU-", "replicas": 2},
            'inv.yaml: nodes[0].namePrefix: "GPU-" makes invalid node names such as "GPU-1"',
        ),
        (
            {
                "namePrefix": "a-",
                "replicas": 2,
                "gpus": [{"profile": "t10", "uuid": FIXED_UUID}],
            },
            "inv.yaml: nodes[0].gpus[0].uuid: a fixed UUID names one GPU; this entry has 2 nodes",
        ),
    ],
)
def test_bad_prefix_entries_are_named(node: dict[str, Any], problem: str) -> None:
    assert any(line.startswith(problem) for line in problems(fleet(node))), problems(fleet(node))


def test_generated_names_must_not_repeat_a_name() -> None:
    found = problems(fleet({"namePrefix": "n", "replicas": 10}, {"name": "n7"}))
    assert 'inv.yaml: nodes[1].name: duplicate node name "n7" (also nodes[0])' in found


def test_replicas_count_against_the_node_bound() -> None:
    found = problems(fleet({"namePrefix": "a", "replicas": 3000}, {"namePrefix": "b", "replicas": 3000}))
    assert found == ["inv.yaml: nodes: 6000 nodes named (replicas counted); at most 5000"]
