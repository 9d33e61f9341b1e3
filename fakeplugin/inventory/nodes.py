"""A `nodes[]` entry of the inventory read and checked: how it names its nodes (name, namePrefix and replicas,
selector, instanceType), labels, NUMA nodes and CPUs, fabric, GPU Operator mode, its GPUs (inventory.gpus)
(pure; every problem with its field path, collected in a yamlschema.Problems)."""

from __future__ import annotations

import re
from typing import Any

from fakeplugin.inventory.fields import (
    ARCHITECTURES,
    CPUS_PER_GPU,
    DEFAULT_CLUSTER_UUID,
    DEFAULT_ZONES,
    GPU_OPERATOR_MODES,
    INSTANCE_TYPE_LABEL,
    MAX_CLIQUE,
    MAX_CPUS,
    MAX_GPUS_PER_NODE,
    MAX_LABELS,
    MAX_NODE_MEMORY,
    MAX_NODES,
    MAX_NUMA_NODES,
    MAX_ZONES,
    MEMORY_PER_CPU,
)
from fakeplugin.inventory.gpus import parse_gpu, parse_quantity, string_like
from fakeplugin.inventory.model import GpuEntry, InstanceType, NodeEntry
from fakeplugin.k8snames import is_dns_subdomain
from fakeplugin.model import Fabric
from fakeplugin.yamlschema import Problems, join, path_key, shorten

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_CLUSTER_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)


def parse_node(
    p: Problems, raw: Any, path: str, gpu_operator: str = GPU_OPERATOR_MODES[0]
) -> NodeEntry | None:
    """The `nodes[]` entry `raw` at `path`; None (its problems added to `p`) when it cannot be made.
    `gpu_operator`: the file's mode, which the entry's own `gpuOperator` overrides."""
    m = p.mapping(
        raw,
        path,
        optional=(
            "name",
            "namePrefix",
            "replicas",
            "selector",
            "labels",
            "kubelet",
            "gpus",
            "numaNodes",
            "cpus",
            "fabric",
            "instanceType",
            "gpuOperator",
        ),
    )
    if m is None:
        return None
    name = p.string(m, "name", path)
    if name is not None and not is_dns_subdomain(name):
        p.add(join(path, "name"), f'"{shorten(name)}" is not a valid node name (lower-case DNS subdomain)')
    prefix, replicas = _prefix(p, m, path)
    match_labels = None
    if "selector" in m:
        sel = p.mapping(m["selector"], join(path, "selector"), required=("matchLabels",))
        if sel is not None:
            match_labels = _labels(p, sel, "matchLabels", join(path, "selector"))
    if sum(key in m for key in ("name", "namePrefix", "selector", "instanceType")) != 1:
        p.add(
            path,
            "needs exactly one of name (one node), namePrefix (many), selector (nodes by label) or "
            "instanceType (Karpenter's nodes of that type)",
        )
    labels = _labels(p, m, "labels", path) if "labels" in m else {}
    # `gpus:` with nothing after it is YAML null: a plain worker, like an absent list.
    raw_gpus = p.sequence(m, "gpus", path) if m.get("gpus") is not None else []
    if raw_gpus is not None and len(raw_gpus) > MAX_GPUS_PER_NODE:  # every entry is at least one GPU
        p.add(join(path, "gpus"), f"{len(raw_gpus)} entries; a node has at most {MAX_GPUS_PER_NODE} GPUs")
        raw_gpus = None
    gpus = [parse_gpu(p, g, f"{path}.gpus[{i}]") for i, g in enumerate(raw_gpus or [])]
    kubelet = p.boolean(m, "kubelet", path)
    entries = tuple(g for g in gpus if g is not None)
    if sum(g.count for g in entries) > MAX_GPUS_PER_NODE:
        p.add(
            join(path, "gpus"),
            f"{sum(g.count for g in entries)} GPUs in all; a node has at most {MAX_GPUS_PER_NODE}",
        )
    if replicas > 1:
        for gpu in entries:
            if gpu.uuid is not None:
                p.add(join(gpu.path, "uuid"), f"a fixed UUID names one GPU; this entry has {replicas} nodes")
    numa_nodes, cpus = _numa(p, m, path, entries)
    fabric = _fabric(p, m, path, entries) if "fabric" in m else None
    instance_type = _instance_type(p, m, path, cpus) if "instanceType" in m else None
    if instance_type is not None:
        match_labels = {INSTANCE_TYPE_LABEL: instance_type.name}
    if "instanceType" in m and kubelet:
        p.add(
            join(path, "kubelet"), "an instanceType's nodes are Karpenter's, simulated: kubelet must be false"
        )
    return NodeEntry(
        name=name,
        match_labels=match_labels,
        labels=labels or {},
        kubelet=kubelet if kubelet is not None else any(g.count for g in entries) and "instanceType" not in m,
        gpus=entries,
        path=path,
        name_prefix=prefix,
        replicas=replicas,
        numa_nodes=numa_nodes,
        cpus=cpus,
        fabric=fabric,
        instance_type=instance_type,
        gpu_operator=parse_gpu_operator(p, m, path, gpu_operator),
    )


def parse_gpu_operator(p: Problems, m: dict[str, Any], path: str, default: str) -> str:
    """`gpuOperator` of the mapping `m` at `path` (the top level, or a node entry), `default` when absent."""
    if "gpuOperator" not in m:
        return default
    value = p.string(m, "gpuOperator", path)
    if value is not None and value not in GPU_OPERATOR_MODES:
        p.add(
            join(path, "gpuOperator"),
            f'unknown GPU Operator mode "{shorten(value)}"; one of: {", ".join(GPU_OPERATOR_MODES)}',
        )
    return value if value in GPU_OPERATOR_MODES else default


def _labels(p: Problems, m: dict[str, Any], key: str, path: str) -> dict[str, str] | None:
    value = m.get(key)
    if isinstance(value, dict) and len(value) > MAX_LABELS:
        p.add(join(path, key), f"{len(value)} labels; at most {MAX_LABELS}")
        return None
    labels = p.string_map(m, key, path)
    for k, v in (labels or {}).items():
        prefix, _, name = k.rpartition("/")
        if (prefix and not is_dns_subdomain(prefix)) or len(name) > 63 or not _LABEL_NAME.match(name):
            p.add(join(join(path, key), path_key(k)), "is not a valid label key")
        elif len(v) > 63 or not _LABEL_VALUE.match(v):
            p.add(join(join(path, key), path_key(k)), f'"{shorten(v)}" is not a valid label value')
    return labels


def _prefix(p: Problems, m: dict[str, Any], path: str) -> tuple[str | None, int]:
    """`namePrefix` and `replicas` (1 when absent); the names they make must be node names."""
    prefix = p.string(m, "namePrefix", path)
    replicas = 1
    if "replicas" in m:
        why = "Kubernetes' largest cluster"
        replicas = p.integer(m, "replicas", path, minimum=1, maximum=MAX_NODES, why=why)
        if "namePrefix" not in m:
            p.add(join(path, "replicas"), "goes with namePrefix (a name or a selector is one entry)")
    if prefix is not None:
        last = f"{prefix}{(replicas or 1) - 1}"
        if not prefix or not is_dns_subdomain(last):
            p.add(
                join(path, "namePrefix"),
                f'"{shorten(prefix)}" makes invalid node names such as "{shorten(last)}" '
                "(lower-case DNS subdomain)",
            )
    return prefix, replicas or 1


def _numa(p: Problems, m: dict[str, Any], path: str, gpus: tuple[GpuEntry, ...]) -> tuple[int | None, int]:
    """`numaNodes` (default: 1 + the highest GPU numaNode, else None) and `cpus` (default: 16 per GPU),
    checked against each other and the GPUs' numaNode."""
    given = [g for g in gpus if g.numa_node is not None]
    numa_nodes = None
    if "numaNodes" in m:
        why = "8 sockets, or 2 split 4 ways, twice"
        numa_nodes = p.integer(m, "numaNodes", path, minimum=1, maximum=MAX_NUMA_NODES, why=why)
    elif given:
        numa_nodes = 1 + max(g.numa_node for g in given if g.numa_node is not None)
    for gpu in given:
        if "numaNodes" in m and numa_nodes is not None and (gpu.numa_node or 0) >= numa_nodes:
            p.add(
                join(gpu.path, "numaNode"),
                f"{gpu.numa_node} is not a NUMA node of this node (numaNodes is {numa_nodes}: "
                f"0..{numa_nodes - 1})",
            )
    cpus = CPUS_PER_GPU * max(sum(g.count for g in gpus), 1)
    if "cpus" in m:
        cpus = p.integer(m, "cpus", path, minimum=1, maximum=MAX_CPUS, why="Linux's NR_CPUS") or cpus
        if numa_nodes is not None and cpus % numa_nodes:
            p.add(
                join(path, "cpus"),
                f"{cpus} CPUs do not split evenly over {numa_nodes} NUMA nodes; "
                f"use a multiple of {numa_nodes}",
            )
    elif numa_nodes is not None and cpus % numa_nodes:
        cpus = numa_nodes * -(-cpus // numa_nodes)  # the default rounded up to split evenly
    return numa_nodes, cpus


def _fabric(p: Problems, m: dict[str, Any], path: str, gpus: tuple[GpuEntry, ...]) -> Fabric | None:
    """`fabric: {clique, clusterUUID}`: only on entries that name their nodes and have GPUs."""
    where = join(path, "fabric")
    f = p.mapping(m["fabric"], where, required=("clique",), optional=("clusterUUID",))
    if f is None:
        return None
    clique = p.integer(f, "clique", where, minimum=0, maximum=MAX_CLIQUE, why="NVML's cliqueId is 32 bits")
    cluster = DEFAULT_CLUSTER_UUID
    if "clusterUUID" in f:
        given = string_like(
            p, f, "clusterUUID", where, _CLUSTER_UUID, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)"
        )
        cluster = given.lower() if given else cluster
    if "selector" in m or "instanceType" in m:
        p.add(where, "needs nodes by name or namePrefix: a selector's nodes cannot be counted into a clique")
    if not any(g.count for g in gpus):
        p.add(where, "needs gpus: the clique is what NVML reports for the node's GPUs")
    return None if clique is None else Fabric(clique, cluster)


def _instance_type(p: Problems, m: dict[str, Any], path: str, cpus: int) -> InstanceType | None:
    """`instanceType: {name, price, memory, zones}`: a Karpenter instance type (docs/karpenter.md)."""
    where = join(path, "instanceType")
    t = p.mapping(
        m["instanceType"], where, required=("name", "price"), optional=("memory", "zones", "architecture")
    )
    if t is None:
        return None
    name = p.string(t, "name", where)
    if name is not None and (not name or len(name) > 63 or not _LABEL_VALUE.match(name)):
        p.add(
            join(where, "name"),
            f'"{shorten(name)}" is not a valid label value (the node\'s {INSTANCE_TYPE_LABEL})',
        )
        name = None
    price = t.get("price")
    if "price" in t and (
        isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 < price < 1e6
    ):
        p.add(join(where, "price"), f"must be a number above 0 (per hour), got {shorten(repr(price))}")
        price = None
    memory = cpus * MEMORY_PER_CPU
    if "memory" in t:
        given = t["memory"]
        try:
            memory = parse_quantity(given) if isinstance(given, str) else -1
        except ValueError:
            memory = -1
        if not 0 < memory <= MAX_NODE_MEMORY:
            p.add(
                join(where, "memory"),
                f"must be a quantity like 256Gi, at most 64Ti, got {shorten(repr(given))}",
            )
    zones: tuple[str, ...] = DEFAULT_ZONES
    if "zones" in t:
        raw = p.sequence(t, "zones", where)
        if raw is not None and not 0 < len(raw) <= MAX_ZONES:
            p.add(join(where, "zones"), f"lists {len(raw)} zones; 1 to {MAX_ZONES}")
        elif raw is not None:
            bad = [
                z for z in raw if not isinstance(z, str) or not z or len(z) > 63 or not _LABEL_VALUE.match(z)
            ]
            if bad:
                p.add(join(where, "zones"), f"{shorten(repr(bad[0]))} is not a valid label value")
            zones = tuple(str(z) for z in raw)
    architecture = p.string(t, "architecture", where) if "architecture" in t else ARCHITECTURES[0]
    if architecture is not None and architecture not in ARCHITECTURES:
        p.add(
            join(where, "architecture"), f'"{shorten(architecture)}" is not one of {", ".join(ARCHITECTURES)}'
        )
        architecture = None
    if name is None or price is None or memory <= 0 or architecture is None:
        return None
    return InstanceType(name, float(price), memory, zones, architecture)
