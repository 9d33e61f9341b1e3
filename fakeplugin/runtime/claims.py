"""The claim checks the runtime makes for every driver, before the driver (and its node lock) sees a claim.

As upstream's kubeletplugin helper (k8s.io/dynamic-resource-allocation v0.34.0, kubeletplugin/draplugin.go:
`nodePluginImplementation.NodePrepareResources` calls `getResourceClaims`, "Do slow API calls before
serializing", then `DRAPlugin.PrepareResourceClaims` with the claim objects; `NodeUnprepareResources` hands
`UnprepareResourceClaims` the references only): Prepare GETs each claim once and refuses, with the
helper's texts, a claim it cannot read (`retrieve claim <ns>/<name>: <error>`), one without
`status.allocation` (`claim <ns>/<name> not allocated`) and one whose UID is not the reference's
(`claim <ns>/<name> got replaced`); the driver gets the rest as `runtime.driver.Claim`s.

Before any API call or path, every reference is checked: its parts name files (CDI specs) and CDI devices,
so they must be what the API server could have sent (Kubernetes UIDs are lowercase UUIDs, DNS labels).
Prepare refuses another; Unprepare answers success (it can never have been prepared, and failing it would
leave its pod Terminating forever).

[differs] Upstream fails the whole call at the first refused claim; here only that claim fails.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from fakeplugin.k8snames import DNS_LABEL, DNS_SUBDOMAIN, MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.runtime.driver import Claim, GetClaim, Obj, Preparing

log = logging.getLogger(__name__)


def ref_problem(ref: ClaimRef) -> str:
    """Why a reference could not have come from the API server; "" when it could."""
    rules = (
        ("uid", ref.uid, DNS_LABEL, MAX_DNS_LABEL, "lowercase letters, digits and '-'"),
        ("namespace", ref.namespace, DNS_LABEL, MAX_DNS_LABEL, "a DNS label"),
        ("name", ref.name, DNS_SUBDOMAIN, MAX_DNS_SUBDOMAIN, "a DNS subdomain"),
    )
    for field, value, pattern, max_len, what in rules:
        if len(value) > max_len or not pattern.fullmatch(value):
            return (
                f"invalid claim reference {str(ref)!r}: {field} {value!r} must be {what}, "
                f"at most {max_len} characters, starting and ending with a letter or digit"
            )
    return ""


def claim_problem(claim: Obj, ref: ClaimRef) -> str:
    """Why the claim read for `ref` cannot be prepared (upstream's texts); "" when it can."""
    name = f"claim {ref.namespace}/{ref.name}"
    status = claim.get("status") or {}
    if not (status.get("allocation") if isinstance(status, Mapping) else None):
        return f"{name} not allocated"
    metadata = claim.get("metadata") or {}
    if not isinstance(metadata, Mapping) or metadata.get("uid") != ref.uid:
        return f"{name} got replaced"
    return ""


def prepare(preparing: Preparing, refs: Sequence[ClaimRef], get_claim: GetClaim) -> dict[str, PrepareResult]:
    """Each claim read and checked, in the caller's thread; the driver prepares those that pass."""
    results: dict[str, PrepareResult] = {}
    claims: list[Claim] = []
    for ref in refs:
        if problem := ref_problem(ref):
            results[ref.uid] = _refused(ref, problem)
            continue
        try:
            obj = get_claim(ref.namespace, ref.name)
        except Exception as e:  # whatever the API client raises
            results[ref.uid] = _refused(ref, f"retrieve claim {ref.namespace}/{ref.name}: {e}")
            continue
        if problem := claim_problem(obj, ref):
            results[ref.uid] = _refused(ref, problem)
        else:
            claims.append(Claim(ref, obj))
    return results | (preparing.prepare(claims) if claims else {})


def unprepare(preparing: Preparing, refs: Sequence[ClaimRef]) -> dict[str, str]:
    """The driver unprepares every reference that could name a claim; the others succeed."""
    results: dict[str, str] = {}
    valid: list[ClaimRef] = []
    for ref in refs:
        if problem := ref_problem(ref):
            log.warning("unprepare %s: nothing to do: %s", ref, problem)
            results[ref.uid] = ""
        else:
            valid.append(ref)
    return results | (preparing.unprepare(valid) if valid else {})


def _refused(ref: ClaimRef, message: str) -> PrepareResult:
    log.error("prepare %s: %s", ref, message)
    return PrepareResult(error=message)


class CheckedClaims:
    """runtime.driver.Claims over a driver's prepare side: what the gRPC edge serves."""

    def __init__(self, preparing: Preparing, get_claim: GetClaim) -> None:
        self._preparing = preparing
        self._get_claim = get_claim

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return prepare(self._preparing, claims, self._get_claim)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        return unprepare(self._preparing, claims)
