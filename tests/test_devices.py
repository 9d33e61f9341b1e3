"""Devices of a node (drivers.gpu.publish.devices): names, deterministic and unique identities, overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import Inventory, load_inventory, parse_inventory
from fakeplugin.model import GpuDevice

SEED = Path(__file__).resolve().parent.parent / "examples" / "seed-lab.yaml"
T10_NODE = "capi-dralabs-md-gput10-gzl84-f2m2d"
A5000_NODE = "capi-dralabs-md-gpua5000-jw4mx-d64jz"
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$")


def inventory(*gpus: dict[str, Any], driver: str = "580.95.05") -> Inventory:
    return parse_inventory(
        {"driverVersion": driver, "cudaDriverVersion": "13.0", "nodes": [{"name": "n", "gpus": list(gpus)}]}
    )


def node_devices(inv: Inventory, node: str) -> list[GpuDevice]:
    entry = inv.node_entry(node)
    assert entry is not None
    return devices_for_node(inv, entry, node)


def test_seed_lab_t10_node() -> None:
    devices = node_devices(load_inventory(SEED), T10_NODE)
    assert [(d.name, d.minor, d.index, d.type, d.profile) for d in devices] == [
        ("gpu-0", 0, 0, "gpu", "t10"),
        ("gpu-1", 1, 1, "gpu", "t10"),
    ]
    assert devices[0].uuid != devices[1].uuid
    assert devices[0].pci_bus_id != devices[1].pci_bus_id
    for d in devices:
        assert UUID.match(d.uuid) and BUS_ID.match(d.pci_bus_id)
        assert (d.product_name, d.memory_bytes, d.driver_version, d.cuda_driver_version) == (
            "NVIDIA T10", 15360 << 20, "580.126.20", "13.0"
        )  # fmt: skip


def test_pcie_root_is_the_root_bus_of_the_same_domain() -> None:
    devices = node_devices(inventory({"profile": "t4", "count": 8}), "n")
    for d in devices:
        domain, bus = d.pci_bus_id.split(":")[:2]
        assert d.pcie_root == f"pci{domain}:{int(bus, 16) - 1:02x}"


def test_identities_are_deterministic_across_loads() -> None:
    first = node_devices(load_inventory(SEED), A5000_NODE)
    again = node_devices(load_inventory(SEED), A5000_NODE)
    assert first == again


def test_identities_are_unique_across_nodes_and_within_big_nodes() -> None:
    nodes = [f"gpu-node-{i}" for i in range(40)] + [T10_NODE, A5000_NODE]
    inv = parse_inventory(
        {
            "driverVersion": "580.95.05",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": n, "gpus": [{"profile": "h200", "count": 8}]} for n in nodes]
            + [{"name": "big", "gpus": [{"profile": "t4", "count": 128}]}],
        }
    )
    devices = [d for n in [*nodes, "big"] for d in node_devices(inv, n)]
    assert len(devices) == 42 * 8 + 128  # a node at the GPU bound: 16 PCI domains
    assert len({d.uuid for d in devices}) == len(devices)
    assert len({d.pci_bus_id for d in devices}) == len(devices)


def test_same_minor_on_another_node_differs() -> None:
    inv = load_inventory(SEED)
    t10_gpu0, a5000_gpu0 = node_devices(inv, T10_NODE)[0], node_devices(inv, A5000_NODE)[0]
    assert t10_gpu0.name == a5000_gpu0.name == "gpu-0"
    assert t10_gpu0.uuid != a5000_gpu0.uuid and t10_gpu0.pci_bus_id != a5000_gpu0.pci_bus_id


def test_minors_follow_config_order_and_overrides_win() -> None:
    inv = inventory(
        {"profile": "t4", "count": 2},
        {
            "profile": "h200",
            "uuid": "GPU-bd363601-0402-2785-a79b-f013317dbdce",
            "pciBusID": "00000000:00:06.0",
        },
        driver="580.159.04",
    )
    t4a, t4b, h200 = node_devices(inv, "n")
    assert [d.name for d in (t4a, t4b, h200)] == ["gpu-0", "gpu-1", "gpu-2"]
    assert (h200.uuid, h200.pci_bus_id, h200.pcie_root) == (
        "GPU-bd363601-0402-2785-a79b-f013317dbdce", "0000:00:06.0", "pci0000:00"
    )  # fmt: skip
    assert (h200.addressing_mode, t4a.addressing_mode) == ("None", None)
    assert h200.driver_version == "580.159.04"  # kept as NVML prints it


def test_override_equal_to_a_derived_identity_is_refused() -> None:
    derived = node_devices(inventory({"profile": "t4"}), "n")[0]
    inv = inventory({"profile": "t4"}, {"profile": "t4", "pciBusID": derived.pci_bus_id})
    with pytest.raises(ValueError) as exc:
        node_devices(inv, "n")
    assert str(exc.value) == (
        f"nodes[0].gpus[1] on node n: gpu-1 has the pciBusID of gpu-0 ({derived.pci_bus_id}); "
        "override pciBusID with another value"
    )


def test_selector_entry_devices_depend_on_the_node_name() -> None:
    inv = parse_inventory(
        {
            "driverVersion": "580.95.05",
            "cudaDriverVersion": "13.0",
            "nodes": [{"selector": {"matchLabels": {"gpu": "t4"}}, "gpus": [{"profile": "t4"}]}],
        }
    )
    entry = inv.node_entry("w1", {"gpu": "t4"})
    assert entry is not None
    w1, w2 = devices_for_node(inv, entry, "w1"), devices_for_node(inv, entry, "w2")
    assert w1[0].uuid != w2[0].uuid


def test_the_fabric_of_a_node_reaches_every_gpu_and_its_mig_devices() -> None:
    fabric = {"clique": 3, "clusterUUID": "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"}
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [
                {
                    "name": "tray",
                    "fabric": fabric,
                    "gpus": [
                        {"profile": "gb200", "count": 3},
                        {"profile": "gb200", "mig": [{"profile": "1g.23gb"}]},
                    ],
                },
                {"name": "hgx", "gpus": [{"profile": "h200", "count": 2}]},
            ],
        }
    )
    tray = devices_for_node(inv, inv.nodes[0], "tray")
    assert [d.type for d in tray] == ["gpu"] * 3 + ["mig"]
    assert {d.board.fabric for d in tray} == {inv.nodes[0].fabric}
    assert inv.nodes[0].fabric is not None and inv.nodes[0].fabric.clique == 3
    assert all(d.board.fabric is None for d in devices_for_node(inv, inv.nodes[1], "hgx"))
