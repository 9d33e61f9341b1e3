"""Who uses which device, and with what load (pure).

On a simulated node there is no kubelet to ask, so its PodResources `List` answer is derived from what the
kubelet derives it from (kubernetes/kubernetes v1.37.2 pkg/kubelet/cm/container_manager_linux.go
`GetDynamicResources`, pkg/kubelet/cm/dra/manager.go `GetContainerClaimInfos`): for each active pod whose
claims are prepared, each container in spec order, each claim it references (its `resources.claims`, in
the pod's `spec.resourceClaims` order, then the DRA extended-resource claim when a request mapping names
the container), every device of that claim (all of its allocation's results: the kubelet does not filter
by request). A pod that is deleted, ended (Succeeded, Failed) or not yet prepared has none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fakeplugin.fleet import podclaims, stages
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.load import Load, LoadError, effective, object_load

Obj = Mapping[str, Any]
ClaimKey = tuple[str, str]  # (namespace, name)


def active(pod: Obj) -> bool:
    """A pod the kubelet's List reports with its claims: prepared, not ended, not gone or deleting."""
    meta = pod.get("metadata") or {}
    if pod.get("gone") or meta.get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return (meta.get("annotations") or {}).get(stages.PREPARED) == "true"


def pod_uid(pod: Obj | None) -> str:
    """The pod's metadata.uid, as the exporter reads it from the API ("" when the pod is unread)."""
    return str(((pod or {}).get("metadata") or {}).get("uid") or "")


def pod_uses(pod: Obj, claims: Mapping[ClaimKey, Obj]) -> list[Use]:
    """The PodResources uses of one pod (`claims`: the ResourceClaims by namespace and name)."""
    meta = pod["metadata"]
    namespace = meta["namespace"]
    names = podclaims.pod_claims(pod).names
    order = [c["name"] for c in (pod.get("spec") or {}).get("resourceClaims") or []]
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    out: list[Use] = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        referenced = {r["name"] for r in (container.get("resources") or {}).get("claims") or []}
        claim_names = [names[n] for n in order if n in referenced and n in names]
        mappings = extended.get("requestMappings") or []
        if podclaims.EXTENDED in names and any(m.get("containerName") == container["name"] for m in mappings):
            claim_names.append(names[podclaims.EXTENDED])
        for claim_name in claim_names:
            claim = claims.get((namespace, claim_name))
            if claim is None:
                continue
            for result in _results(claim):
                out.append(
                    Use(
                        pod=meta["name"],
                        namespace=namespace,
                        container=container["name"],
                        claim_name=claim_name,
                        claim_namespace=namespace,
                        driver=result.get("driver", ""),
                        pool=result.get("pool", ""),
                        device=result.get("device", ""),
                        pod_uid=pod_uid(pod),
                    )
                )
    return out


def node_uses(pods: Iterable[Obj], claims: Mapping[ClaimKey, Obj]) -> list[Use]:
    """The uses of a node's pods, active ones only, in the order given."""
    return [use for pod in pods if active(pod) for use in pod_uses(pod, claims)]


def _results(claim: Obj) -> list[Mapping[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def device_loads(
    uses: Sequence[Use],
    claims: Mapping[ClaimKey, Obj],
    pods: Mapping[ClaimKey, Obj],
    on_error: Callable[[LoadError], None],
) -> dict[str, Load]:
    """Device name → its load: a claim's annotation wins for the claim's devices, else the busiest pod's
    using it (fakeplugin.telemetry.load.effective); a bad annotation is reported to `on_error` and ignored.
    `pods` by (namespace, name)."""
    claim_loads: dict[str, list[Load | None]] = {}
    pod_loads: dict[str, list[Load | None]] = {}
    for use in uses:
        claim = claims.get((use.claim_namespace, use.claim_name))
        claim_loads.setdefault(use.device, []).append(_read(claim, "claim", on_error))
        pod = pods.get((use.namespace, use.pod))
        pod_loads.setdefault(use.device, []).append(_read(pod, "pod", on_error))
    return {device: effective(claim_loads[device], pod_loads[device]) for device in pod_loads}


def _read(obj: Obj | None, kind: str, on_error: Callable[[LoadError], None]) -> Load | None:
    if obj is None:
        return None
    try:
        return object_load(obj, kind)
    except LoadError as exc:
        on_error(exc)
        return None
