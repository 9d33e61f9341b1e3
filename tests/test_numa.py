"""NUMA placement: the inventory's numaNodes / cpus / numaNode, the devices made of them, and what each
driver release publishes (resource.kubernetes.io/numaNode: 0.5.0-dev only, int or `ints` list)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakeplugin import featuregates, releases
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.drivers.gpu.publish.slices import device_to_api
from fakeplugin.inventory import InventoryError, load_inventory, parse_inventory
from fakeplugin.render import render_documents

NUMA_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "numa.yaml"
ATTRIBUTE = "resource.kubernetes.io/numaNode"
DEV = releases.get("0.5.0-dev")


def inventory(node: dict[str, Any]) -> dict[str, Any]:
    return {"driverVersion": "580.159.04", "cudaDriverVersion": "13.0", "nodes": [{"name": "n", **node}]}


def placement(node: dict[str, Any]) -> list[tuple[int | None, str, str]]:
    """(numa_node, cpu_affinity, numa_affinity) of each GPU of node "n"."""
    inv = parse_inventory(inventory(node))
    return [
        (d.numa_node, d.board.cpu_affinity, d.board.numa_affinity)
        for d in devices_for_node(inv, inv.nodes[0], "n")
    ]


def problems(node: dict[str, Any]) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        parse_inventory(inventory(node), source="inv.yaml")
    return exc.value.problems


def test_without_numa_information_the_node_is_a_vm_with_one_unknown_numa_node() -> None:
    # As both H200 captures: sysfs numa_node -1, topo shows NUMA 0 and all 16 vCPUs per GPU.
    assert placement({"gpus": [{"profile": "h200", "count": 2}]}) == [(None, "0-31", "0")] * 2
    assert placement({"cpus": 8, "gpus": [{"profile": "t4"}]}) == [(None, "0-7", "0")]


def test_gpus_spread_evenly_over_the_numa_nodes_in_minor_order() -> None:
    eight = placement({"numaNodes": 2, "cpus": 224, "gpus": [{"profile": "h100-80gb-hbm3", "count": 8}]})
    assert eight == [(0, "0-111", "0")] * 4 + [(1, "112-223", "1")] * 4
    # 16 CPUs per GPU by default, 3 GPUs on 4 NUMA nodes: 48 CPUs, 12 per node.
    assert placement({"numaNodes": 4, "gpus": [{"profile": "t4", "count": 3}]}) == [
        (0, "0-11", "0"),
        (1, "12-23", "1"),
        (2, "24-35", "2"),
    ]
    # A default that does not split evenly is rounded up: 16 CPUs on 3 nodes -> 18, 6 per node.
    assert placement({"numaNodes": 3, "gpus": [{"profile": "t4"}]}) == [(0, "0-5", "0")]
    assert placement({"numaNodes": 2, "cpus": 2, "gpus": [{"profile": "t4", "count": 2}]}) == [
        (0, "0", "0"),
        (1, "1", "1"),
    ]


def test_numa_node_per_gpu_entry_and_numa_nodes_inferred_from_it() -> None:
    node = {"cpus": 64, "gpus": [{"profile": "l40s", "numaNode": 1}, {"profile": "l40s", "count": 2}]}
    # numaNodes is 2 (1 + the highest numaNode); the others spread: minors 1, 2 of 3 on nodes 0, 1.
    assert placement(node) == [(1, "32-63", "1"), (0, "0-31", "0"), (1, "32-63", "1")]


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        (
            {"numaNodes": 2, "gpus": [{"profile": "t4", "numaNode": 2}]},
            "inv.yaml: nodes[0].gpus[0].numaNode: 2 is not a NUMA node of this node (numaNodes is 2: 0..1)",
        ),
        (
            {"numaNodes": 2, "cpus": 9, "gpus": [{"profile": "t4"}]},
            "inv.yaml: nodes[0].cpus: 9 CPUs do not split evenly over 2 NUMA nodes; use a multiple of 2",
        ),
        (
            {"numaNodes": 0, "gpus": [{"profile": "t4"}]},
            "inv.yaml: nodes[0].numaNodes: must be at least 1, got 0",
        ),
        (
            {"numaNodes": 17, "gpus": [{"profile": "t4"}]},
            "inv.yaml: nodes[0].numaNodes: must be at most 16 (8 sockets, or 2 split 4 ways, twice), got 17",
        ),
        (
            {"cpus": 5000, "gpus": [{"profile": "t4"}]},
            "inv.yaml: nodes[0].cpus: must be at most 4096 (Linux's NR_CPUS), got 5000",
        ),
        (
            {"gpus": [{"profile": "t4", "numaNode": -1}]},
            "inv.yaml: nodes[0].gpus[0].numaNode: must be at least 0, got -1",
        ),
        (
            {"gpus": [{"profile": "t4", "numaNode": "1"}]},
            'inv.yaml: nodes[0].gpus[0].numaNode: must be an integer, got string "1"',
        ),
    ],
)
def test_numa_problems_name_file_and_field(node: dict[str, Any], expected: str) -> None:
    assert problems(node) == [expected]


def test_only_0_5_0_dev_publishes_numa_node_int_or_list_with_its_gate() -> None:
    inv = load_inventory(NUMA_EXAMPLE)
    entry = inv.node_entry("pcie-l40s")
    assert entry is not None
    gpu3 = devices_for_node(inv, entry, "pcie-l40s")[3]
    assert gpu3.numa_node == 1
    for name in ("25.12", "0.4.1"):  # neither has it on GPUs (only VFIO devices' `numa`, not emulated)
        assert ATTRIBUTE not in device_to_api(gpu3, releases.get(name))["attributes"]
    assert device_to_api(gpu3, DEV)["attributes"][ATTRIBUTE] == {"int": 1}
    listed = DEV.with_gates(featuregates.parse("DRAListTypeAttributes=true", DEV))
    assert device_to_api(gpu3, listed)["attributes"][ATTRIBUTE] == {"ints": [1]}
    assert DEV.with_gates(featuregates.parse("", DEV)) == DEV  # off by default


def test_mig_devices_carry_their_parents_numa_node() -> None:
    # mig.go CommonAttributesMig at 95932046 calls addNumaNodeAttribute(attrs, parent.numaNode).
    inv = parse_inventory(
        inventory(
            {"numaNodes": 2, "gpus": [{"profile": "h200", "count": 2, "mig": [{"profile": "7g.141gb"}]}]}
        )
    )
    devices = devices_for_node(inv, inv.nodes[0], "n")
    assert [(d.type, d.numa_node) for d in devices] == [("mig", 0), ("mig", 1)]
    assert [device_to_api(d, DEV)["attributes"][ATTRIBUTE] for d in devices] == [{"int": 0}, {"int": 1}]
    partitions = devices_for_node(inv, inv.nodes[0], "n", dynamic_mig=True)
    assert {d.numa_node for d in partitions if d.minor == 1} == {1}


def test_a_vm_without_numa_publishes_no_numa_node_in_any_release() -> None:
    docs = render_documents(load_inventory(NUMA_EXAMPLE), node="cloud-h200")
    devices = [d for s in docs if s["kind"] == "ResourceSlice" for d in s["spec"]["devices"]]
    assert len(devices) == 2 and all(ATTRIBUTE not in d["attributes"] for d in devices)
