"""What the view keeps of each object it watches: slim copies (pure), so a thousand nodes' slices, claims
and pods cost little memory and an update that changes nothing the page shows (a pod's status heartbeat,
a Node's lease-driven condition times) is no change at all (equal copies).

Every kind has a key (what a DELETED event names) and a slim function; a slim function returns None for an
object the view does not show (a pod without claims).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.kube import NODES, SLICES, Obj

KWOK_ANNOTATION = "kwok.x-k8s.io/node"  # fakeplugin.fleet.stages's: a simulated node
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
PODS = "/api/v1/pods"


@dataclass(frozen=True)
class Kind:
    """A collection the view watches: its API path, the key of an object in it, and its slim copy."""

    name: str
    path: str
    key: Callable[[Obj], str]
    slim: Callable[[Obj], Obj | None]
    field_selector: str = ""
    crd: str = ""  # watched only once this CustomResourceDefinition exists


def by_name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def by_uid(obj: Obj) -> str:
    return str(obj["metadata"]["uid"])


def by_namespace_name(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def slim_node(obj: Obj) -> Obj:
    meta, status = obj["metadata"], obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return {
        "name": meta["name"],
        "labels": dict(meta.get("labels") or {}),
        "ready": ready.get("status") == "True",
        "unschedulable": bool((obj.get("spec") or {}).get("unschedulable")),
        "simulated": (meta.get("annotations") or {}).get(KWOK_ANNOTATION) == "fake",
    }


def _attribute(device: Obj, name: str) -> str:
    value = (device.get("attributes") or {}).get(name) or {}
    return str(next(iter(value.values()), "")) if value else ""


def slim_slice(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    return {
        "driver": spec.get("driver", ""),
        "node": spec.get("nodeName") or "",
        "pool": pool.get("name", ""),
        "generation": int(pool.get("generation") or 0),
        "devices": [
            {
                "name": d["name"],
                "type": _attribute(d, "type"),
                "uuid": _attribute(d, "uuid"),
                "parent": _attribute(d, "parentUUID"),
                "model": _attribute(d, "productName"),
                "profile": _attribute(d, "profile"),
                "taints": [
                    {k: t[k] for k in ("key", "value", "effect") if t.get(k)} for t in d.get("taints") or []
                ],
            }
            for d in spec.get("devices") or []
        ],
    }


def slim_claim(obj: Obj) -> Obj:
    meta, status = obj["metadata"], obj.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "results": [[r.get("driver", ""), r.get("pool", ""), r.get("device", "")] for r in results],
        "pods": [
            {"name": r.get("name", ""), "uid": r.get("uid", "")}
            for r in status.get("reservedFor") or []
            if r.get("resource") == "pods"
        ],
    }


def slim_pod(obj: Obj) -> Obj | None:
    spec = obj.get("spec") or {}
    if not spec.get("resourceClaims"):
        return None  # the page shows pods through their claims
    meta = obj["metadata"]
    phase = (obj.get("status") or {}).get("phase") or "Pending"
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "node": spec.get("nodeName") or "",
        "phase": "Terminating" if meta.get("deletionTimestamp") else phase,
    }


def slim_domain(obj: Obj) -> Obj:
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta["uid"],
        "numNodes": int(spec.get("numNodes") or 0),
        "status": status.get("status") or cd_api.STATUS_NOT_READY,
        "nodes": [
            {k: n.get(k) for k in ("name", "cliqueID", "index", "status")} for n in status.get("nodes") or []
        ],
    }


def slim_clique(obj: Obj) -> Obj:
    meta = obj["metadata"]
    domain, _, clique = meta["name"].partition(".")  # <cdUID>.<cliqueID> (apis.computedomain.clique_name)
    return {
        "domain": (meta.get("labels") or {}).get(cd_api.COMPUTE_DOMAIN_LABEL, domain),
        "clique": clique,
        "daemons": [{k: d.get(k) for k in ("nodeName", "index", "status")} for d in obj.get("daemons") or []],
    }


def kinds(gpu_driver: str, cd_driver: str) -> tuple[Kind, ...]:
    """What the view watches: Nodes, the two drivers' ResourceSlices, ResourceClaims, Pods (with claims),
    ComputeDomains and their cliques (those two once their CRDs exist)."""
    return (
        Kind("nodes", NODES, by_name, slim_node),
        Kind("gpu-slices", SLICES, by_name, slim_slice, field_selector=f"spec.driver={gpu_driver}"),
        Kind("cd-slices", SLICES, by_name, slim_slice, field_selector=f"spec.driver={cd_driver}"),
        Kind("claims", CLAIMS, by_uid, slim_claim),
        Kind("pods", PODS, by_uid, slim_pod),
        Kind(
            "domains",
            cd_api.compute_domains_path(),
            by_uid,
            slim_domain,
            crd=f"computedomains.{cd_api.GROUP}",
        ),
        Kind(
            "cliques",
            cd_api.cliques_path(""),
            by_namespace_name,
            slim_clique,
            crd=f"computedomaincliques.{cd_api.GROUP}",
        ),
    )
