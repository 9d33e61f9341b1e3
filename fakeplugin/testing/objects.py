"""Pure helpers of fakeplugin.testing: objects in, objects out (no cluster).

Builders of the objects a GPU test applies, as plain dicts (`kubectl apply` and `FakepluginCluster.apply`
take them): `device_request`, `resource_claim`, `resource_claim_template`, `opaque_config`, `container`,
`pod`, `claim_pod`. Readers of what came back: `allocated`, `container_gpus`, `describe_events`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import yaml

from fakeplugin import DEFAULT_DRIVER_NAME

RESOURCE_API = "resource.k8s.io/v1"


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


# ---- builders ---------------------------------------------------------------------------------------------


def device_request(
    name: str = "gpu",
    device_class: str = DEFAULT_DRIVER_NAME,
    *,
    selector: str | None = None,
    count: int | None = None,
    admin_access: bool = False,
    capacity: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """One request of a claim: devices of `device_class` (the chart's: gpu.nvidia.com, mig.nvidia.com,
    vfio.gpu.nvidia.com), `count` of them (the API's default: one), that meet the CEL expression
    `selector` (`device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'`). `admin_access`: any
    device, even one allocated to others (DRAAdminAccess; the namespace needs the admin label);
    `capacity`: what it consumes of a shared device (`{"memory": "4Gi"}`, consumable shares);
    `tolerations`: device taints it accepts."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if count is not None:
        exactly["count"] = count
    if admin_access:
        exactly["adminAccess"] = True
    if capacity is not None:
        exactly["capacity"] = {"requests": dict(capacity)}
    if tolerations:
        exactly["tolerations"] = [dict(t) for t in tolerations]
    return {"name": name, "exactly": exactly}


def opaque_config(
    parameters: Mapping[str, Any], *, requests: Sequence[str] = (), driver: str = DEFAULT_DRIVER_NAME
) -> dict[str, Any]:
    """An entry of a claim's `config`: opaque `parameters` for `driver` (NVIDIA's are
    `{"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": ...}`), for the claim's
    `requests` (none named: all of them)."""
    entry: dict[str, Any] = {"opaque": {"driver": driver, "parameters": dict(parameters)}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def _claim_spec(
    requests: Sequence[Mapping[str, Any]],
    constraints: Sequence[Mapping[str, Any]],
    config: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": [dict(r) for r in requests or [device_request()]]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return {"devices": devices}


def resource_claim(
    name: str,
    *requests: Mapping[str, Any],
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaim of `requests` (`device_request`s; none: one GPU of any kind, request `gpu`), with
    `constraints` (`{"requests": [...], "matchAttribute": "gpu.nvidia.com/productName"}`), `config`
    (`opaque_config`s) and `annotations` (fakeplugin's fault annotations, `fakeplugin.dev/...`)."""
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": _claim_spec(requests, constraints, config),
    }


def resource_claim_template(
    name: str,
    *requests: Mapping[str, Any],
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ResourceClaimTemplate whose claims are `resource_claim`'s of the same arguments: the Kubernetes
    control plane makes one per pod that names the template; `annotations` go on each claim it makes."""
    spec: dict[str, Any] = {"spec": _claim_spec(requests, constraints, config)}
    if annotations:
        spec["metadata"] = {"annotations": dict(annotations)}
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": spec,
    }


def container(
    name: str = "ctr",
    *,
    claims: Iterable[str | tuple[str, str]] = ("gpu",),
    image: str = "ubuntu:22.04",
    command: Sequence[str] | None = ("sleep", "infinity"),
    **fields: Any,
) -> dict[str, Any]:
    """A container of `image` running `command` (None: the image's own) that uses `claims`: names of its
    pod's claim entries (all of an entry's devices) or (entry, request) pairs (only that request's
    devices). `fields`: further Container fields as the API spells them (`env`, `imagePullPolicy`,
    `resources` for a container without claims); they replace what the arguments set."""
    out: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        out["command"] = list(command)
    uses = [{"name": c} if isinstance(c, str) else {"name": c[0], "request": c[1]} for c in claims]
    if uses:
        out["resources"] = {"claims": uses}
    return {**out, **fields}


def pod(
    name: str,
    containers: Sequence[Mapping[str, Any]],
    *,
    claims: Mapping[str, Mapping[str, str]] | None = None,
    restart_policy: str | None = "Never",
    grace_period_s: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    """A Pod of `containers` (`container`s) with `claims`: claim entry name → where its claim comes from,
    `{"resourceClaimName": claim}` or `{"resourceClaimTemplateName": template}`. Test defaults: no service
    account token, a `grace_period_s` of 1 s, `restart_policy` Never (None: the API's default, Always).
    `spec`: further PodSpec fields as the API spells them (`nodeSelector`, `securityContext`, ...)."""
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": grace_period_s,
    }
    if restart_policy is not None:
        pod_spec["restartPolicy"] = restart_policy
    if claims:
        pod_spec["resourceClaims"] = [{"name": entry, **source} for entry, source in claims.items()]
    pod_spec["containers"] = [dict(c) for c in containers]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {**pod_spec, **spec}}


def claim_pod(name: str, source: Mapping[str, str], containers: Sequence[str] = ("ctr",)) -> dict[str, Any]:
    """The usual GPU test pod: `pod` defaults, one claim entry `gpu` from `source`
    (`{"resourceClaimName": claim}` or `{"resourceClaimTemplateName": template}`), used whole by each
    container (`container` defaults) named in `containers`."""
    return pod(name, [container(c) for c in containers], claims={"gpu": source})
