"""The inventory's upper bounds (inventory.fields MAX_*, yamlschema.Limits): each refused with the file and
field path, before anything large is built; values at the bound still pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.inventory import InventoryError, fields, load_inventory

HEAD = 'driverVersion: "580.95.05"\ncudaDriverVersion: "13.0"\n'


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "inv.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def problems(tmp_path: Path, text: str | bytes) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(InventoryError) as exc:
        load_inventory(path)
    assert all(line.startswith(f"{path}: ") for line in exc.value.problems), exc.value.problems
    return [line.removeprefix(f"{path}: ") for line in exc.value.problems]


def doc(*nodes: dict[str, Any]) -> str:
    return HEAD + yaml.safe_dump({"nodes": list(nodes)})


def test_count_beyond_a_node_is_refused_before_devices_exist(tmp_path: Path) -> None:
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "h200", "count": 100_000_000}]})) == [
        "nodes[0].gpus[0].count: must be at most 128 (GPUs per node), got 100000000"
    ]
    at_bound = load_inventory(write(tmp_path, doc({"name": "n", "gpus": [{"profile": "t4", "count": 128}]})))
    assert at_bound.nodes[0].gpu_count == 128


def test_gpus_of_a_node_are_bounded_across_entries(tmp_path: Path) -> None:
    gpus = [{"profile": "t4", "count": 100}, {"profile": "t4", "count": 100}]
    assert problems(tmp_path, doc({"name": "n", "gpus": gpus})) == [
        "nodes[0].gpus: 200 GPUs in all; a node has at most 128"
    ]
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "t4"}] * 129})) == [
        "nodes[0].gpus: 129 entries; a node has at most 128 GPUs"
    ]


def test_nodes_and_gpus_per_file_are_bounded(tmp_path: Path) -> None:
    many = [{"name": f"n{i}"} for i in range(fields.MAX_NODES + 1)]
    assert problems(tmp_path, doc(*many)) == [
        "nodes: 5001 entries; at most 5000 (Kubernetes' largest cluster)"
    ]
    big = [{"name": f"n{i}", "gpus": [{"profile": "t4", "count": 128}]} for i in range(626)]
    assert problems(tmp_path, doc(*big)) == [
        "nodes: 80128 GPUs in all; at most 80000 (5000 nodes of 16 GPUs)"
    ]


def test_mig_entries_are_bounded_by_the_gpu_model(tmp_path: Path) -> None:
    mig = [{"profile": "1g.18gb"}] * 8
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "h200", "mig": mig}]})) == [
        "nodes[0].gpus[0].mig: 8 entries; a h200 has at most 7 MIG devices"
    ]
    huge = [{"profile": "1g.18gb", "count": 10**12}]
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "h200", "mig": huge}]})) == [
        "nodes[0].gpus[0].mig[0].count: 1000000000000 x 1g.18gb exceed the profile's 7 instances on a GPU"
    ]


def test_labels_strings_memory_and_versions_are_bounded(tmp_path: Path) -> None:
    labels = {f"k{i}": "v" for i in range(65)}
    assert problems(tmp_path, doc({"selector": {"matchLabels": labels}})) == [
        "nodes[0].selector.matchLabels: 65 labels; at most 64"
    ]
    long_name = "a" * 300
    assert problems(tmp_path, doc({"name": long_name})) == [
        f'nodes[0].name: "{"a" * 60}... (300 characters)" is not a valid node name (lower-case DNS subdomain)'
    ]
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "t4", "memory": "2Ti"}]})) == [
        "nodes[0].gpus[0].memory: must be at most 1Ti (the largest GPU has 288 GB), got '2Ti'"
    ]
    assert problems(tmp_path, doc({"name": "n", "gpus": [{"profile": "t4", "productName": "x" * 65}]})) == [
        "nodes[0].gpus[0].productName: must be at most 64 characters"
    ]
    text = doc({"name": "n"}).replace('"580.95.05"', '"580.' + "9" * 40 + '"')
    assert problems(tmp_path, text) == [
        f'driverVersion: must be a version like "580.95.05" or "580.95", got "580.{"9" * 40}"'
    ]


def test_a_file_over_one_mib_is_refused_unread(tmp_path: Path) -> None:
    text = doc({"name": "n"}) + "#" * fields.MAX_FILE_BYTES
    assert problems(tmp_path, text) == ["(top level): the file is larger than 1 MiB, the most allowed"]


def test_non_utf8_names_the_byte_offset(tmp_path: Path) -> None:
    assert problems(tmp_path, HEAD.encode() + b"nodes: [{name: \xff}]\n") == [
        "byte offset 68: not UTF-8 (byte ff: invalid start byte); save the file as UTF-8"
    ]
    assert problems(tmp_path, "nodes: []".encode("utf-16")) == [
        "byte offset 0: not UTF-8 (byte ff: invalid start byte); save the file as UTF-8"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("x: " + "[" * 17 + "]" * 17, "line 1, column 19: invalid YAML: nested more than 16 levels deep"),
        ("x: " + "[" * 100_000, "line 1, column 19: invalid YAML: nested more than 16 levels deep"),
        ("x: " + "9" * 5000, "line 1, column 4: invalid YAML: a value of 5000 characters (at most 1024)"),
        ("a: &a [*a]\n", "line 1, column 8: invalid YAML: alias *a is inside the node it refers to"),
        ("a: &a {x: 1}\nb: {<<: *a}\n", "line 2, column 5: invalid YAML: merge keys (<<) are not supported"),
        ("a: b\nc: d\x00\n", "line 2, column 5: invalid YAML: character #x0000 is not allowed"),
        ("a: b\x1b\n", "line 1, column 5: invalid YAML: character #x001b is not allowed"),
    ],
)
def test_yaml_limits_and_forbidden_characters(tmp_path: Path, text: str, expected: str) -> None:
    assert problems(tmp_path, text) == [expected]


def test_billion_laughs_is_refused_while_composing(tmp_path: Path) -> None:
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]  # 10^10 values
    (problem,) = problems(tmp_path, "\n".join(lines) + "\n")
    assert problem == (
        "line 5, column 45: invalid YAML: more than 100000 values (aliases counted as what they repeat)"
    )


def test_aliases_within_the_bounds_still_work(tmp_path: Path) -> None:
    text = HEAD + "nodes:\n- name: a\n  gpus: &g [{profile: t4, count: 2}]\n- name: b\n  gpus: *g\n"
    assert [n.gpu_count for n in load_inventory(write(tmp_path, text)).nodes] == [2, 2]


def test_values_in_messages_stay_on_one_line(tmp_path: Path) -> None:
    assert problems(tmp_path, doc({"name": "bad\nname\x1b"})) == [
        'nodes[0].name: "bad\\nname\\x1b" is not a valid node name (lower-case DNS subdomain)'
    ]
