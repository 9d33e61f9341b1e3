"""Pure helpers of fakeplugin.testing: objects in, objects out (no cluster)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import yaml


class Allocated(NamedTuple):
    """One device of a claim's allocation: where it is, and which of the claim's requests it serves."""

    node: str
    pool: str
    device: str
    request: str


def as_objects(objects: str | Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Kubernetes objects from YAML text (one or more documents), one dict, or dicts; Lists unpacked."""
    if isinstance(objects, str):
        docs: list[Any] = [d for d in yaml.safe_load_all(objects) if d]
    elif isinstance(objects, Mapping):
        docs = [objects]
    else:
        docs = list(objects)
    found: list[dict[str, Any]] = []
    for doc in docs:
        if not isinstance(doc, Mapping) or "kind" not in doc:
            raise ValueError(f"not a Kubernetes object (no kind): {json.dumps(doc)[:200]}")
        if doc["kind"] == "List":
            found += as_objects(doc.get("items", []))
        else:
            found.append(dict(doc))
    return found


def as_list(objects: list[dict[str, Any]]) -> str:
    """Objects as one `kind: List` for `kubectl -f -`."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def allocated(claim: Mapping[str, Any], slices: Iterable[Mapping[str, Any]]) -> list[Allocated]:
    """The devices allocated to `claim`; a device's node is its ResourceSlice's (its pool's when no slice
    of that pool names a node, e.g. network-attached devices)."""
    results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
    nodes = {
        (s["spec"]["driver"], s["spec"]["pool"]["name"]): s["spec"]["nodeName"]
        for s in slices
        if s["spec"].get("nodeName")
    }
    return [
        Allocated(nodes.get((r["driver"], r["pool"]), r["pool"]), r["pool"], r["device"], r["request"])
        for r in results
    ]


def container_gpus(env: Mapping[str, str]) -> dict[str, str]:
    """Device name → UUID of each GPU or MIG device a container got, by device name: what the CDI edits of
    its devices set (`FAKEPLUGIN_GPU_<minor>[_MIG_<gi>_<start>]_DEVICE` and `..._UUID`; a claim-level
    `NVIDIA_VISIBLE_DEVICES` is `void`, as with NVIDIA's driver)."""
    found = {
        name: env.get(key.removesuffix("DEVICE") + "UUID", "")
        for key, name in env.items()
        if key.startswith("FAKEPLUGIN_GPU_") and key.endswith("_DEVICE")
    }
    return dict(sorted(found.items()))


def object_ref(obj: str | Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of "kind/name" (kubectl's spelling: pod/x, resourceclaim/y) or of an object."""
    if isinstance(obj, str):
        kind, sep, name = obj.partition("/")
        if not sep or not name:
            raise ValueError(f"{obj!r}: want kind/name, e.g. pod/my-pod")
        return kind, name
    return obj["kind"], obj["metadata"]["name"]


def describe_events(events: Iterable[Mapping[str, Any]]) -> str:
    """Events as `kubectl get events` lists them: one line each, oldest first."""
    lines = [
        f"  {e.get('lastTimestamp') or e.get('eventTime') or ''}  {e.get('type', '')}  "
        f"{e.get('reason', '')}: {e.get('message', '').strip()}"
        for e in events
    ]
    return "\n".join(lines) or "  (no events)"
