"""A ComputeDomain's global status, as NVIDIA's controller computes it every 2 s (pure).

Sources (main 95932046): cmd/compute-domain-controller/cdstatus.go (`status.nodes` from the cliques' daemons
and from daemon pods without a fabric; stale clique entries) and computedomain.go `calculateGlobalStatus`.
Objects are API dicts; fields a Go struct would hold as zero values when absent read as such here
(`index` 0, `status` "", an absent `cliqueID` label is not an empty one).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from fakeplugin.apis import computedomain as api

Obj = dict[str, Any]


def _node(name: str, ip: str, clique_id: str, index: int, status: str) -> Obj:
    """A status.nodes entry as NVIDIA's API type serializes it (`status` omitted when empty)."""
    node: Obj = {"name": name, "ipAddress": ip, "cliqueID": clique_id, "index": index}
    if status:
        node["status"] = status
    return node


def nodes_from_cliques(cliques: Iterable[Obj]) -> list[Obj]:
    """Every daemon of the ComputeDomain's cliques, as a node."""
    return [
        _node(
            d.get("nodeName", ""),
            d.get("ipAddress", ""),
            d.get("cliqueID", ""),
            int(d.get("index") or 0),
            d.get("status", ""),
        )
        for clique in cliques
        for d in clique.get("daemons") or []
    ]


def fabric_less(pod: Obj) -> bool:
    """A daemon pod that says it has no fabric: its clique ID label present and empty. Unlabelled pods
    count as fabric-attached (their daemon has not labelled them yet)."""
    labels = pod["metadata"].get("labels") or {}
    return labels.get(api.CLIQUE_ID_LABEL) == ""


def pod_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def nodes_from_pods(pods: Iterable[Obj]) -> list[Obj]:
    """A node per scheduled daemon pod with an IP (no clique: cliqueID "", index -1), Ready with its pod."""
    nodes = []
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName", "")
        ip = (pod.get("status") or {}).get("podIP", "")
        if node_name and ip:
            status = api.STATUS_READY if pod_ready(pod) else api.STATUS_NOT_READY
            nodes.append(_node(node_name, ip, "", -1, status))
    return nodes


def surviving_fabric_nodes(existing: Iterable[Obj], fabric_pods: Iterable[Obj]) -> list[Obj]:
    """Without ComputeDomainCliques (the daemons write status.nodes themselves): the fabric nodes already in
    the status whose IP is still a fabric daemon pod's."""
    ips = {ip for pod in fabric_pods if (ip := (pod.get("status") or {}).get("podIP"))}
    return [n for n in existing if n.get("cliqueID") and n.get("ipAddress") in ips]


def desired_nodes(cd: Obj, cliques: Sequence[Obj], pods: Sequence[Obj], *, cliques_gate: bool) -> list[Obj]:
    """status.nodes for the ComputeDomain: from its cliques (gate ComputeDomainCliques) or the surviving
    fabric nodes of its status, then its daemon pods without a fabric. `cliques` and `pods`: this
    ComputeDomain's (label resource.nvidia.com/computeDomain=<uid>)."""
    fabric_less_pods = [p for p in pods if fabric_less(p)]
    if cliques_gate:
        fabric = nodes_from_cliques(cliques)
    else:
        existing = (cd.get("status") or {}).get("nodes") or []
        fabric = surviving_fabric_nodes(existing, [p for p in pods if not fabric_less(p)])
    return fabric + nodes_from_pods(fabric_less_pods)


def global_status(num_nodes: int, nodes: Sequence[Obj], *, host_managed: bool = False) -> str:
    """NotReady while fewer nodes than spec.numNodes are listed or any is NotReady; else Ready (so with
    numNodes 0, the default, a ComputeDomain without nodes is Ready). Host-managed IMEX: always Ready."""
    if host_managed:
        return api.STATUS_READY
    if len(nodes) < num_nodes:
        return api.STATUS_NOT_READY
    if any(n.get("status") == api.STATUS_NOT_READY for n in nodes):
        return api.STATUS_NOT_READY
    return api.STATUS_READY


def _comparable(node: Obj) -> tuple[str, str, str, int, str]:
    return (
        node.get("name", ""),
        node.get("ipAddress", ""),
        node.get("cliqueID", ""),
        int(node.get("index") or 0),
        node.get("status", ""),
    )


def same_nodes(a: Iterable[Obj], b: Iterable[Obj]) -> bool:
    """Equal as maps by node name (NVIDIA's `nodesEqual`: order does not matter)."""
    return {n.get("name"): _comparable(n) for n in a} == {n.get("name"): _comparable(n) for n in b}


def status_update(cd: Obj, cliques: Sequence[Obj], pods: Sequence[Obj], *, cliques_gate: bool) -> Obj | None:
    """The new `status` when the nodes changed, else None (NVIDIA's `syncCD`: only a change of nodes
    writes, recomputing the global status with them)."""
    current = cd.get("status") or {}
    nodes = desired_nodes(cd, cliques, pods, cliques_gate=cliques_gate)
    if same_nodes(current.get("nodes") or [], nodes):
        return None
    return {"status": global_status(num_nodes(cd), nodes), "nodes": nodes or None}


def num_nodes(cd: Obj) -> int:
    return int(cd["spec"].get("numNodes") or 0)


def stale_daemons(clique: Obj, pods: Iterable[Obj]) -> list[str]:
    """The clique's daemons on nodes where no daemon pod is scheduled any more (NVIDIA's
    `cleanupClique`: every daemon pod of the driver namespace counts, whichever ComputeDomain)."""
    running = {node for pod in pods if (node := (pod.get("spec") or {}).get("nodeName"))}
    return [d.get("nodeName", "") for d in clique.get("daemons") or [] if d.get("nodeName") not in running]
