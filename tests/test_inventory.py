"""The inventory schema (inventory.parse): defaults, selection, and exact error paths and messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.inventory import InventoryError, load_inventory, parse_inventory
from fakeplugin.inventory.gpus import parse_quantity
from fakeplugin.profiles import profile_names

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "examples" / "seed-lab.yaml"
MIB = 1024 * 1024
KNOWN = ", ".join(profile_names())


def inventory(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"driverVersion": "580.95.05", "cudaDriverVersion": "13.0", "nodes": list(nodes)}


def problems(data: Any) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        parse_inventory(data, source="inv.yaml")
    assert str(exc.value) == "\n".join(exc.value.problems)
    return exc.value.problems


def test_seed_lab_example() -> None:
    inv = load_inventory(SEED)
    assert (inv.driver_version, inv.cuda_driver_version, inv.source) == ("580.126.20", "13.0", str(SEED))
    t10, a5000 = inv.nodes
    assert t10.name == "capi-dralabs-md-gput10-gzl84-f2m2d" and t10.match_labels is None
    assert [(g.profile.name, g.count, g.ecc, g.memory_bytes) for g in t10.gpus] == [
        ("t10", 2, True, 15360 * MIB)
    ]
    assert [(g.profile.name, g.count, g.ecc, g.memory_bytes) for g in a5000.gpus] == [
        ("rtx-a5000", 1, True, 23028 * MIB)
    ]
    assert t10.kubelet and a5000.kubelet
    assert t10.gpu_count == 2 and a5000.path == "nodes[1]"


def test_defaults_and_overrides() -> None:
    inv = parse_inventory(
        inventory(
            {"name": "worker"},
            {"name": "empty", "gpus": None, "kubelet": True, "labels": {"zone": "a"}},
            {
                "name": "n1",
                "gpus": [
                    {"profile": "rtx-a5000"},
                    {
                        "profile": "h200",
                        "ecc": False,
                        "memory": "143771Mi",
                        "productName": "NVIDIA H200 NVL",
                        "uuid": "GPU-BD363601-0402-2785-A79B-F013317DBDCE",
                        "pciBusID": "00000000:3B:00.0",
                    },
                ],
            },
        )
    )
    worker, empty, n1 = inv.nodes
    assert (worker.gpus, worker.kubelet, worker.labels) == ((), False, {})
    assert (empty.gpus, empty.kubelet, empty.labels) == ((), True, {"zone": "a"})
    a5000, h200 = n1.gpus
    assert (a5000.count, a5000.ecc, a5000.memory_bytes, a5000.uuid, a5000.pci_bus_id) == (
        1, False, 24564 * MIB, None, None
    )  # fmt: skip
    assert (h200.ecc, h200.memory_bytes, h200.product_name) == (False, 143771 * MIB, "NVIDIA H200 NVL")
    assert h200.uuid == "GPU-bd363601-0402-2785-a79b-f013317dbdce"
    assert h200.pci_bus_id == "0000:3b:00.0"
    assert h200.path == "nodes[2].gpus[1]"


def test_node_entry_by_name_first_then_first_matching_selector() -> None:
    inv = parse_inventory(
        inventory(
            {"selector": {"matchLabels": {"gpu": "t4"}}, "gpus": [{"profile": "t4"}]},
            {"selector": {"matchLabels": {"gpu": "t4", "zone": "a"}}, "gpus": [{"profile": "a10"}]},
            {"name": "n1", "gpus": [{"profile": "h200"}]},
            {"selector": {"matchLabels": {}}, "gpus": [{"profile": "l40s"}]},
        )
    )
    by_t4, by_t4_zone, n1, catch_all = inv.nodes
    assert inv.node_entry("n1", {"gpu": "t4"}) is n1
    assert inv.node_entry("n2", {"gpu": "t4", "zone": "a"}) is by_t4
    assert inv.node_entry("n3", {"gpu": "a10"}) is catch_all
    assert by_t4_zone.match_labels == {"gpu": "t4", "zone": "a"}
    assert parse_inventory(inventory({"name": "n1"})).node_entry("n2", {"x": "y"}) is None


def gpu(**fields: Any) -> dict[str, Any]:
    """An inventory with one node `n` holding one GPU entry (a T4 unless `profile` says otherwise)."""
    return inventory({"name": "n", "gpus": [{"profile": "t4", **fields}]})


def node(**fields: Any) -> dict[str, Any]:
    return inventory({"name": "n", **fields})


G0 = "nodes[0].gpus[0]"
UUID = "GPU-bd363601-0402-2785-a79b-f013317dbdce"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (gpu(profile="h300"), f'{G0}.profile: unknown profile "h300" (known: {KNOWN})'),
        (gpu(count=0), f"{G0}.count: must be at least 1, got 0"),
        (gpu(count=-2), f"{G0}.count: must be at least 1, got -2"),
        (gpu(count=1.5), f"{G0}.count: must be an integer, got number 1.5"),
        (gpu(count="2"), f'{G0}.count: must be an integer, got string "2"'),
        (gpu(count=True), f"{G0}.count: must be an integer, got boolean true"),
        (gpu(cuont=2), f'{G0}.cuont: unknown field (did you mean "count"?)'),
        (
            gpu(profile="h200", ecc=False),
            f'{G0}.ecc: profile "h200" knows no memory total with ECC off; '
            "set memory to the real NVML memory.total (a quantity like 23028Mi)",
        ),
        (gpu(memory="16GB"), f"{G0}.memory: must be a positive quantity like 23028Mi or 15Gi, got '16GB'"),
        (gpu(memory=0), f"{G0}.memory: must be a positive quantity like 23028Mi or 15Gi, got 0"),
        (gpu(productName="x" * 65), f"{G0}.productName: must be at most 64 characters"),
        (
            gpu(uuid="GPU-1234"),
            f'{G0}.uuid: must look like GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex), got "GPU-1234"',
        ),
        (
            gpu(pciBusID="3b:00.0"),
            f'{G0}.pciBusID: must look like "0000:3b:00.0" (domain:bus:device.function, hex), got "3b:00.0"',
        ),
        (
            gpu(count=2, pciBusID="0000:3b:00.0"),
            f"{G0}.pciBusID: names one GPU, so it needs count 1 (count is 2)",
        ),
        (gpu(count=3, uuid=UUID), f"{G0}.uuid: names one GPU, so it needs count 1 (count is 3)"),
        (
            inventory(
                {"name": "n", "gpus": [{"profile": "t4", "uuid": UUID}]},
                {"name": "m", "gpus": [{"profile": "t4", "uuid": "GPU-" + UUID[4:].upper()}]},
            ),
            f'nodes[1].gpus[0].uuid: duplicate uuid "{UUID}" (also {G0})',
        ),
        (
            node(
                gpus=[
                    {"profile": "t4", "pciBusID": "0000:3b:00.0"},
                    {"profile": "t4", "pciBusID": "00000000:3B:00.0"},
                ]
            ),
            f'nodes[0].gpus[1].pciBusID: duplicate pciBusID "0000:3b:00.0" on this node (also {G0})',
        ),
        (
            {**node(), "driverVersion": "580.95.05-1"},
            'driverVersion: must be a version like "580.95.05" or "580.95", got "580.95.05-1"',
        ),
        (
            {**node(), "driverVersion": 580.95},
            "driverVersion: must be a string, got number 580.95 (quote it in YAML)",
        ),
        (
            {**node(), "cudaDriverVersion": "13.0.1"},
            'cudaDriverVersion: must be a version like "13.0", got "13.0.1"',
        ),
        (
            {**node(), "driverName": "x"},
            "driverName: unknown field (the driver name is the --driver-name flag (env DRIVER_NAME), "
            "not configuration)",
        ),
        (
            inventory({"name": "n"}, {"name": "m"}, {"name": "n"}),
            'nodes[2].name: duplicate node name "n" (also nodes[0])',
        ),
        (
            inventory({"gpus": []}),
            "nodes[0]: needs exactly one of name (one node), namePrefix (many), selector (nodes by label) or "
            "instanceType (Karpenter's nodes of that type)",
        ),
        (
            node(selector={"matchLabels": {"a": "b"}}),
            "nodes[0]: needs exactly one of name (one node), namePrefix (many), selector (nodes by label) or "
            "instanceType (Karpenter's nodes of that type)",
        ),
        (
            inventory({"selector": {"labels": {"a": "b"}}}),
            "nodes[0].selector.labels: unknown field (known fields: matchLabels)",
        ),
        (node(kubelet="yes"), 'nodes[0].kubelet: must be true or false, got string "yes"'),
        (node(gpus={"profile": "t4"}), "nodes[0].gpus: must be a list, got a mapping"),
        (inventory("n1"), 'nodes[0]: must be a mapping, got string "n1"'),
        (
            inventory({"name": "Node_1"}),
            'nodes[0].name: "Node_1" is not a valid node name (lower-case DNS subdomain)',
        ),
        (
            node(labels={"gpu": True}),
            "nodes[0].labels.gpu: value must be a string, got boolean true (quote it in YAML)",
        ),
        (node(labels={"bad key": "x"}), "nodes[0].labels.bad key: is not a valid label key"),
        (node(labels={"k": "a b"}), 'nodes[0].labels.k: "a b" is not a valid label value'),
        (inventory(), "nodes: must list at least one node"),
        ({"driverVersion": "580.95.05"}, "cudaDriverVersion: required field is missing"),
        ([inventory()], "(top level): must be a mapping, got a list"),
        (None, "(top level): the inventory is empty; it needs driverVersion, cudaDriverVersion and nodes"),
    ],
)
def test_each_problem_has_its_path_and_message(data: Any, expected: str) -> None:
    assert f"inv.yaml: {expected}" in problems(data)


def test_every_problem_is_reported_at_once() -> None:
    data = inventory(
        {"name": "n", "gpus": [{"profile": "t4", "count": 0}, {"profile": "nope"}]},
        {"name": "n", "extra": 1},
    )
    data["cudaDriverVersion"] = "13"
    assert problems(data) == [
        'inv.yaml: cudaDriverVersion: must be a version like "13.0", got "13"',
        "inv.yaml: nodes[0].gpus[0].count: must be at least 1, got 0",
        f'inv.yaml: nodes[0].gpus[1].profile: unknown profile "nope" (known: {KNOWN})',
        "inv.yaml: nodes[1].extra: unknown field "
        "(known fields: cpus, fabric, gpuOperator, gpus, instanceType, kubelet, labels, name, namePrefix, "
        "numaNodes, replicas, selector)",
        'inv.yaml: nodes[1].name: duplicate node name "n" (also nodes[0])',
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            'driverVersion: "1.2"\nnodes:\n  - name: a\n   gpus: []\n',
            "line 4, column 4: invalid YAML: expected <block end>, but found '<block mapping start>'",
        ),
        (
            'driverVersion: "1.2"\ndriverVersion: "1.3"\n',
            "line 2, column 1: invalid YAML: duplicate key 'driverVersion'",
        ),
        ("nodes: [\n", "line 2, column 1: invalid YAML: expected the node content, but found '<stream end>'"),
    ],
)
def test_yaml_errors_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert exc.value.problems == [f"{path}: {expected}"]


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as exc:
        load_inventory(tmp_path / "missing.yaml")
    assert str(exc.value) == f"{tmp_path / 'missing.yaml'}: cannot read: No such file or directory"


def test_unquoted_yaml_labels_are_caught_in_files(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        yaml.safe_dump(inventory({"name": "n", "labels": {"nvidia.com/dra-kubelet-plugin": True}}))
    )
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert exc.value.problems == [
        f"{path}: nodes[0].labels.nvidia.com/dra-kubelet-plugin: value must be a string, got boolean true "
        "(quote it in YAML)"
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [("23028Mi", 23028 * MIB), ("15Gi", 15 << 30), ("1Ti", 1 << 40), ("4Ki", 4096), ("1024", 1024)],
)
def test_parse_quantity(text: str, value: int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["16GB", "1.5Gi", "-1Mi", "", "Mi"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="is not a quantity like 23028Mi"):
        parse_quantity(text)
