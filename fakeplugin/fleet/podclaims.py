"""What the kubelet reads from a pod for DRA, and what it would hand each container (pure).

Upstream: pkg/kubelet/cm/dra/manager.go (claims of a pod: spec.resourceClaims resolved through
status.resourceClaimStatuses for template claims, plus status.extendedResourceClaimStatus; a claim's
drivers: those of its allocation's results) and pkg/kubelet/kuberuntime/kuberuntime_container.go
makeCDIDevices (both kubernetes/kubernetes v1.35): a container gets the CDI IDs of the devices whose
request_names is empty or holds the request it references, sub-request suffix stripped; a reference
without a request gets every device of the claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin.model import PrepareResult

# The extended-resource claim (DRAExtendedResource) has no pod claim name; containers reach it through
# status.extendedResourceClaimStatus.requestMappings.
EXTENDED = ""


@dataclass(frozen=True)
class PodClaims:
    """A pod's ResourceClaims by pod claim name; `pending`: pod claim names not generated yet."""

    names: dict[str, str]
    pending: tuple[str, ...] = ()


def pod_claims(pod: Mapping[str, Any]) -> PodClaims:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s["name"]: s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    names: dict[str, str] = {}
    pending: list[str] = []
    for claim in spec.get("resourceClaims") or []:
        name = claim.get("resourceClaimName") or generated.get(claim["name"])
        if name:
            names[claim["name"]] = name
        elif claim.get("resourceClaimTemplateName") and claim["name"] not in generated:
            pending.append(claim["name"])  # the resourceclaim controller has not written it yet
        # else: generated as None, the template produced no claim (upstream: nothing to prepare)
    extended = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended:
        names[EXTENDED] = extended
    return PodClaims(names, tuple(pending))


def claim_drivers(claim: Mapping[str, Any]) -> list[str]:
    """The drivers of an allocated claim (its results' `driver`), each once, in the order of the results."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return list(dict.fromkeys(r["driver"] for r in results))


def container_claim_refs(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(ResourceClaim name, request; "" for all of the claim) of every claim `container` uses: its
    resources.claims, then the extended-resource claim's request mappings naming it."""
    claims = pod_claims(pod).names
    refs = [
        (claims[ref["name"]], ref.get("request") or "")
        for ref in (container.get("resources") or {}).get("claims") or []
        if ref["name"] in claims
    ]
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    refs += [
        (claims[EXTENDED], mapping.get("requestName") or "")
        for mapping in extended.get("requestMappings") or []
        if mapping.get("containerName") == container.get("name") and EXTENDED in claims
    ]
    return refs


def container_cdi_devices(
    pod: Mapping[str, Any], container: Mapping[str, Any], results: Mapping[str, PrepareResult]
) -> list[str]:
    """CDI device IDs the kubelet passes to `container`; `results`: ResourceClaim name → its result."""
    ids: list[str] = []
    for claim_name, request in container_claim_refs(pod, container):
        result = results.get(claim_name)
        for device in result.devices if result else ():
            parents = {r.split("/", 1)[0] for r in device.request_names}
            if not request or not device.request_names or request in parents:
                ids.extend(i for i in device.cdi_device_ids if i not in ids)
    return ids


def prepare_failed_message(claim_name: str, error: str) -> str:
    """The kubelet's FailedPrepareDynamicResources event text for a claim its plugin failed."""
    return (
        "Failed to prepare dynamic resources: prepare dynamic resources: "
        f"NodePrepareResources failed for ResourceClaim {claim_name}: {error}"
    )
