"""Reading the inventory: `load_inventory` (the file, bounded) and `parse_inventory` (its YAML), the top-level
fields and the checks over the whole file (unique names, UUIDs and bus IDs; nodes per clique); each node
entry is inventory.nodes'. Every problem is reported, one line `<file>: <field path>: <problem>` each
(`InventoryError`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fakeplugin import releases
from fakeplugin.inventory.fields import (
    GPU_OPERATOR_MODES,
    LIMITS,
    MAX_GPUS,
    MAX_NODES,
    MAX_NODES_PER_CLIQUE,
    MIG_STRATEGIES,
)
from fakeplugin.inventory.model import Inventory, NodeEntry
from fakeplugin.inventory.nodes import parse_gpu_operator, parse_node
from fakeplugin.yamlschema import Problems, SchemaError, join, parse_yaml, read_document, shorten

_DRIVER_VERSION = re.compile(r"^\d{1,5}\.\d{1,5}(\.\d{1,5})?$")
_CUDA_VERSION = re.compile(r"^\d{1,5}\.\d{1,5}$")


class InventoryError(SchemaError):
    """The inventory is invalid; str() has one line `<file>: <path>: <problem>` per problem."""


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file; InventoryError lists every problem."""
    source = str(path)
    text = read_document(path, source, InventoryError, LIMITS)
    return parse_inventory(parse_yaml(text, source, InventoryError, LIMITS), source=source)


def parse_inventory(data: Any, source: str = "<inventory>") -> Inventory:
    """Validate parsed YAML into an Inventory; InventoryError lists every problem."""
    p = Problems(source)
    if data is None:
        p.add("", "the inventory is empty; it needs driverVersion, cudaDriverVersion and nodes")
        raise InventoryError(p.lines)
    not_config = {
        "driverName": "the driver name is the --driver-name flag (env DRIVER_NAME), not configuration"
    }
    top = p.mapping(
        data,
        "",
        required=("driverVersion", "cudaDriverVersion", "nodes"),
        optional=("driverRelease", "gpuOperator", "migStrategy"),
        hints=not_config,
    )
    if top is None:
        raise InventoryError(p.lines)
    driver = _version(p, top, "driverVersion", _DRIVER_VERSION, '"580.95.05" or "580.95"')
    cuda = _version(p, top, "cudaDriverVersion", _CUDA_VERSION, '"13.0"')
    release = _release(p, top)
    operator = parse_gpu_operator(p, top, "", GPU_OPERATOR_MODES[0])
    mig_strategy = _mig_strategy(p, top)
    raw_nodes = p.sequence(top, "nodes", "")
    if raw_nodes == []:
        p.add("nodes", "must list at least one node")
    if raw_nodes is not None and len(raw_nodes) > MAX_NODES:
        p.add("nodes", f"{len(raw_nodes)} entries; at most {MAX_NODES} (Kubernetes' largest cluster)")
        raise InventoryError(p.lines)
    nodes = [parse_node(p, raw, f"nodes[{i}]", operator) for i, raw in enumerate(raw_nodes or [])]
    named = sum(n.replicas for n in nodes if n is not None and n.match_labels is None)
    if named > MAX_NODES:
        p.add("nodes", f"{named} nodes named (replicas counted); at most {MAX_NODES}")
        raise InventoryError(p.lines)
    gpus = sum(n.gpu_count * n.replicas for n in nodes if n is not None)
    if gpus > MAX_GPUS:
        p.add("nodes", f"{gpus} GPUs in all; at most {MAX_GPUS} ({MAX_NODES} nodes of 16 GPUs)")
    _check_unique(p, [n for n in nodes if n is not None])
    _check_cliques(p, [n for n in nodes if n is not None])
    if not p.ok:
        raise InventoryError(p.lines)
    return Inventory(
        driver_version=driver,
        cuda_driver_version=cuda,
        nodes=tuple(nodes),
        source=source,
        driver_release=release,
        gpu_operator=operator,
        mig_strategy=mig_strategy,
    )


def _mig_strategy(p: Problems, top: dict[str, Any]) -> str:
    """`migStrategy`: one of MIG_STRATEGIES, the first when absent."""
    value = p.string(top, "migStrategy", "") if "migStrategy" in top else MIG_STRATEGIES[0]
    if value is not None and value not in MIG_STRATEGIES:
        p.add("migStrategy", f'unknown MIG strategy "{shorten(value)}"; one of: {", ".join(MIG_STRATEGIES)}')
    return value if value in MIG_STRATEGIES else MIG_STRATEGIES[0]


def _version(p: Problems, m: dict[str, Any], key: str, pattern: re.Pattern[str], example: str) -> str | None:
    value = p.string(m, key, "")
    if value is not None and not pattern.match(value):
        p.add(key, f'must be a version like {example}, got "{shorten(value)}"')
        return None
    return value


def _release(p: Problems, m: dict[str, Any]) -> str:
    """The driverRelease field as a release name (its tag is accepted too); the default when absent."""
    value = m.get("driverRelease", releases.DEFAULT_RELEASE)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        p.add(
            "driverRelease",
            f'must be a string: quote it, driverRelease: "{value}"; known: {releases.known()}',
        )
        return releases.DEFAULT_RELEASE
    if not isinstance(value, str):
        p.add("driverRelease", f"must be a string, one of: {releases.known()}")
        return releases.DEFAULT_RELEASE
    try:
        return releases.get(value).name
    except ValueError:
        p.add("driverRelease", f'unknown NVIDIA driver release "{shorten(value)}"; known: {releases.known()}')
        return releases.DEFAULT_RELEASE


def _check_unique(p: Problems, nodes: list[NodeEntry]) -> None:
    """Node names unique in the file; UUID overrides unique in the file; bus IDs unique per node."""
    names: dict[str, str] = {}
    uuids: dict[str, str] = {}
    types: dict[str, str] = {}
    for node in nodes:
        kind = node.instance_type.name if node.instance_type is not None else None
        if kind is not None:
            if kind in types:
                p.add(
                    join(node.path, "instanceType.name"),
                    f'duplicate instance type "{kind}" (also {types[kind]})',
                )
            types.setdefault(kind, node.path)
        field = "name" if node.name_prefix is None else "namePrefix"
        for name in node.node_names():
            if name in names:
                p.add(join(node.path, field), f'duplicate node name "{name}" (also {names[name]})')
                break
            names.setdefault(name, node.path)
        buses: dict[str, str] = {}
        for gpu in node.gpus:
            if gpu.uuid is not None:
                if gpu.uuid in uuids:
                    p.add(join(gpu.path, "uuid"), f'duplicate uuid "{gpu.uuid}" (also {uuids[gpu.uuid]})')
                uuids.setdefault(gpu.uuid, gpu.path)
            if gpu.pci_bus_id is not None:
                if gpu.pci_bus_id in buses:
                    p.add(
                        join(gpu.path, "pciBusID"),
                        f'duplicate pciBusID "{gpu.pci_bus_id}" on this node (also {buses[gpu.pci_bus_id]})',
                    )
                buses.setdefault(gpu.pci_bus_id, gpu.path)


def _check_cliques(p: Problems, nodes: list[NodeEntry]) -> None:
    """At most MAX_NODES_PER_CLIQUE nodes (replicas counted) share one clique ID in the file."""
    members: dict[str, list[NodeEntry]] = {}
    for node in nodes:
        if node.clique_id:
            members.setdefault(node.clique_id, []).append(node)
    for clique_id, entries in members.items():
        total = sum(e.replicas for e in entries)
        if total > MAX_NODES_PER_CLIQUE:
            listed = ", ".join(f"{e.path} ({e.replicas})" for e in entries)
            p.add(
                "nodes",
                f"clique {clique_id} has {total} nodes: {listed}; at most {MAX_NODES_PER_CLIQUE} nodes share "
                "one clique (NVIDIA's --max-nodes-per-imex-domain; an NVL72 rack has 18 compute trays)",
            )
