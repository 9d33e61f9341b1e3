"""The page's data from a snapshot of what the view watches (pure: objects in, model out).

A node's GPUs are the devices of its gpu.nvidia.com slices (the pool's newest generation), each in one
state, the first that applies:

- `unhealthy`: a taint the driver gives a broken GPU (`<driver>/gpu-lost`, or `<driver>/xid` with an
  XID NVIDIA's driver does not skip: fakeplugin.faults.devicefaults, the same rule and message);
- `tainted`: any other taint (a skipped XID, effect None; a DeviceTaintRule's);
- `allocated`: a ResourceClaim's allocation names it (the claim, and the pods its reservedFor names);
- `free`.

MIG devices (type mig) sit under their parent GPU (attribute parentUUID): the GPU device itself with
DynamicMIG, else a GPU made from the parent UUID (static MIG publishes only the partitions). A GPU with
partitions is in the first state any of them or itself is in. Nodes are grouped by GPU model (or a node
label's value), and by rack: the node's clique label `nvidia.com/gpu.clique`, with the ComputeDomains whose
cliques are on it.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.kube import Obj

STATES = ("unhealthy", "tainted", "allocated", "free")  # the first that applies wins
RANK = {state: i for i, state in enumerate(STATES)}
NO_GPUS = "(no GPUs)"
PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000


@dataclass(frozen=True)
class Snapshot:
    """Slim objects by kind (fakeplugin.view.objects), keyed as their kind keys them."""

    kinds: Mapping[str, Mapping[str, Obj]]
    version: int = 0
    synced: bool = True

    def of(self, kind: str) -> Iterable[Obj]:
        return (self.kinds.get(kind) or {}).values()


@dataclass(frozen=True)
class Query:
    """Which nodes a page shows: by group, rack, a GPU state some GPU of the node is in, a text in the
    node's name or its claims' and pods' names; then `limit` of them from `offset`."""

    group: str = ""
    rack: str = ""
    state: str = ""
    text: str = ""
    offset: int = 0
    limit: int = PAGE_SIZE

    def matches(self, node: Obj) -> bool:
        if self.group and node["group"] != self.group:
            return False
        if self.rack and node["rack"] != self.rack:
            return False
        if self.state and not node["states"].get(self.state):
            return False
        return not self.text or self.text.lower() in node["search"]


def natural(name: str) -> list[Any]:
    """gpu-2 before gpu-10, h200-9 before h200-10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def health(taints: list[Obj], driver: str) -> DeviceFault:
    """The fault a device's taints stand for, as the driver set them (faults.devicefaults)."""
    xid, lost = None, False
    for taint in taints:
        if taint.get("key") == f"{driver}/xid" and str(taint.get("value", "")).isdigit():
            xid = int(taint["value"])
        elif taint.get("key") == f"{driver}/gpu-lost":
            lost = True
    return DeviceFault(xid, lost)


@dataclass
class Allocations:
    """(driver, pool, device) → the claims allocated it, each with its pods."""

    claims: dict[tuple[str, str, str], list[Obj]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def of(cls, snapshot: Snapshot) -> Allocations:
        phases = {(p["namespace"], p["name"]): p["phase"] for p in snapshot.of("pods")}
        allocations = cls()
        for claim in snapshot.of("claims"):
            ref = {
                "namespace": claim["namespace"],
                "name": claim["name"],
                "pods": [
                    {"name": p["name"], "phase": phases.get((claim["namespace"], p["name"]), "")}
                    for p in claim["pods"]
                ],
            }
            for driver, pool, device in claim["results"]:
                allocations.claims[(driver, pool, device)].append(ref)
        return allocations


def newest_slices(snapshot: Snapshot, kind: str) -> dict[str, list[Obj]]:
    """Node name → its slices of `kind`, only those of each pool's newest generation."""
    newest: dict[tuple[str, str], int] = {}
    slices = list(snapshot.of(kind))
    for s in slices:
        key = (s["driver"], s["pool"])
        newest[key] = max(newest.get(key, 0), s["generation"])
    by_node: dict[str, list[Obj]] = defaultdict(list)
    for s in slices:
        if s["node"] and s["generation"] == newest[(s["driver"], s["pool"])]:
            by_node[s["node"]].append(s)
    return by_node


def _cell(device: Obj, slice_: Obj, allocations: Allocations) -> Obj:
    fault = health(device["taints"], slice_["driver"])
    claims = allocations.claims.get((slice_["driver"], slice_["pool"], device["name"]), [])
    if not fault.healthy:
        state = "unhealthy"
    elif device["taints"]:
        state = "tainted"
    else:
        state = "allocated" if claims else "free"
    cell = {
        "name": device["name"],
        "model": device["model"],
        "uuid": device["uuid"],
        "state": state,
        "claims": claims,
        "taints": device["taints"],
        "health": "Healthy" if fault.healthy else "Unhealthy",
        "message": fault.message,
    }
    if device["profile"]:
        cell["profile"] = device["profile"]
    return cell


def gpus_of(slices: list[Obj], allocations: Allocations) -> list[Obj]:
    """A node's GPUs, in name order, each with its MIG partitions."""
    gpus: dict[str, Obj] = {}
    partitions: list[tuple[Obj, Obj]] = []
    for slice_ in slices:
        for device in slice_["devices"]:
            if device["type"] == "mig":
                partitions.append((device, slice_))
            else:
                cell = _cell(device, slice_, allocations)
                gpus[device["uuid"] or device["name"]] = {**cell, "partitions": []}
    for device, slice_ in partitions:
        parent = gpus.get(device["parent"])
        if parent is None:  # static MIG: the GPU itself is not published
            name = device["name"].split("-mig-")[0]
            parent = {
                "name": name,
                "model": device["model"],
                "uuid": device["parent"],
                "state": "free",
                "claims": [],
                "taints": [],
                "health": "Healthy",
                "message": "",
                "partitions": [],
            }
            gpus[device["parent"]] = parent
        parent["partitions"].append(_cell(device, slice_, allocations))
    for gpu in gpus.values():
        gpu["partitions"].sort(key=lambda p: natural(p["name"]))
        gpu["state"] = min((gpu["state"], *(p["state"] for p in gpu["partitions"])), key=RANK.__getitem__)
    return sorted(gpus.values(), key=lambda g: natural(g["name"]))


def _node(node: Obj, gpus: list[Obj], channels: list[Obj], group_label: str) -> Obj:
    models = sorted(Counter(g["model"] for g in gpus if g["model"]))
    model = " + ".join(models) if models else NO_GPUS
    states = Counter(g["state"] for g in gpus)
    names = [node["name"]] + [
        text
        for cell in [*gpus, *(p for g in gpus for p in g["partitions"]), *channels]
        for claim in cell["claims"]
        for text in (claim["name"], *(p["name"] for p in claim["pods"]))
    ]
    return {
        "name": node["name"],
        "group": (node["labels"].get(group_label) or f"({group_label} unset)") if group_label else model,
        "model": model,
        "rack": node["labels"].get(cd_api.GPU_CLIQUE_LABEL, ""),
        "ready": node["ready"],
        "unschedulable": node["unschedulable"],
        "simulated": node["simulated"],
        "states": {s: states[s] for s in STATES if states[s]},
        "partitions": sum(len(g["partitions"]) for g in gpus),
        "gpus": gpus,
        "channels": channels,
        "search": " ".join(names).lower(),
    }


def _count(nodes: list[Obj]) -> Obj:
    states: Counter[str] = Counter()
    for node in nodes:
        states.update(node["states"])
    return {
        "nodes": len(nodes),
        "notReady": sum(not n["ready"] for n in nodes),
        "gpus": sum(len(n["gpus"]) for n in nodes),
        "partitions": sum(n["partitions"] for n in nodes),
        "states": {s: states[s] for s in STATES},
    }


def _domains(snapshot: Snapshot) -> list[Obj]:
    cliques: dict[str, list[Obj]] = defaultdict(list)
    for clique in snapshot.of("cliques"):
        cliques[clique["domain"]].append(clique)
    return sorted(
        (
            {
                **cd,
                "cliques": sorted(
                    ({"clique": c["clique"], "daemons": c["daemons"]} for c in cliques[cd["uid"]]),
                    key=lambda c: c["clique"],
                ),
            }
            for cd in snapshot.of("domains")
        ),
        key=lambda d: (d["namespace"], d["name"]),
    )


@dataclass(frozen=True)
class FleetModel:
    """Every node's view (name order) and the summary over them."""

    nodes: list[Obj]
    summary: Obj
    by_name: Mapping[str, Obj]

    def page(self, query: Query) -> Obj:
        """The nodes `query` picks, `limit` of them from `offset`, and how many match."""
        matching = [n for n in self.nodes if query.matches(n)]
        limit = max(1, min(query.limit, MAX_PAGE_SIZE))
        offset = max(0, query.offset)
        return {
            "version": self.summary["version"],
            "total": len(matching),
            "offset": offset,
            "limit": limit,
            "nodes": [public(n) for n in matching[offset : offset + limit]],
        }

    def node(self, name: str) -> Obj | None:
        node = self.by_name.get(name)
        return None if node is None else public(node)


def public(node: Obj) -> Obj:
    """A node as the page gets it (without its search text)."""
    return {k: v for k, v in node.items() if k != "search"}


def build(snapshot: Snapshot, *, group_label: str = "") -> FleetModel:
    """The model of `snapshot`: nodes (their GPUs, partitions, ComputeDomain channels) and the summary by
    group, by rack, and the ComputeDomains."""
    allocations = Allocations.of(snapshot)
    gpu_slices = newest_slices(snapshot, "gpu-slices")
    cd_slices = newest_slices(snapshot, "cd-slices")
    nodes = sorted(
        (
            _node(
                node,
                gpus_of(gpu_slices.get(node["name"], []), allocations),
                [_cell(d, s, allocations) for s in cd_slices.get(node["name"], []) for d in s["devices"]],
                group_label,
            )
            for node in snapshot.of("nodes")
        ),
        key=lambda n: natural(n["name"]),
    )
    groups: dict[str, list[Obj]] = defaultdict(list)
    racks: dict[str, list[Obj]] = defaultdict(list)
    for node in nodes:
        groups[node["group"]].append(node)
        if node["rack"]:
            racks[node["rack"]].append(node)
    domains = _domains(snapshot)
    summary = {
        "version": snapshot.version,
        "synced": snapshot.synced,
        "groupedBy": group_label or "model",
        "totals": _count(nodes),
        "groups": [{"name": name, **_count(members)} for name, members in sorted(groups.items())],
        "racks": [
            {
                "clique": clique,
                **_count(members),
                "domains": [
                    {"namespace": d["namespace"], "name": d["name"], "status": d["status"]}
                    for d in domains
                    if any(c["clique"] == clique for c in d["cliques"])
                ],
            }
            for clique, members in sorted(racks.items())
        ],
        "domains": domains,
    }
    return FleetModel(nodes, summary, {n["name"]: n for n in nodes})
