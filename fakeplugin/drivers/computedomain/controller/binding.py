"""KEP-5007 binding conditions of ComputeDomain channel devices, as our controller answers them (pure).

Opt-in (`--binding-conditions`), beyond every NVIDIA release: NVIDIA's design work for this (issue #653,
PR #855 and the proposal PR #1359 of kubernetes-sigs/dra-driver-nvidia-gpu) was closed unmerged, and its
condition names could not be read; the names and reasons here are ours (docs/compute-domains.md,
*Binding conditions*). PR #855 did the node's part in the kubelet plugin; here the controller does it.

The scheduler (kubernetes/kubernetes v1.37.2 `pkg/scheduler/framework/plugins/dynamicresources/
dynamicresources.go` PreBind, isClaimReadyForBinding) holds a pod in PreBind until every binding condition
of its allocated devices is True in the claim's `status.devices[]` entry (driver, pool, device), gives up
when a binding-failure condition is True or after `bindingTimeout` (DynamicResourcesArgs, default 600 s:
`pkg/scheduler/apis/config/types_pluginargs.go`), and deallocates the claim in its next cycle's PostFilter.

For an allocated channel device with our binding condition the controller
- labels the allocated node `resource.nvidia.com/computeDomain=<cdUID>` (as the channel Prepare would, had
  the pod been bound), so the ComputeDomain's DaemonSet starts its daemon there;
- sets `ComputeDomainDaemonReady` True once the node's entry in the ComputeDomain's `status.nodes` is
  Ready, else False (reason: not started, NotReady, ComputeDomain missing);
- sets `ComputeDomainDaemonFailed` True when the node's daemon failed (our fault annotation
  `FAILED_ANNOTATION`) or the node belongs to another ComputeDomain, else False.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin.apis import computedomain as api
from fakeplugin.apis.computedomain import FAILED_CONDITION, READY_CONDITION
from fakeplugin.faults.daemonfaults import FAILED_ANNOTATION
from fakeplugin.runtime.claimstatus import Key

Obj = dict[str, Any]


@dataclass(frozen=True)
class Channel:
    """An allocated channel device waiting on our binding condition."""

    driver: str
    pool: str
    device: str
    node: str  # the allocation's node; "" when its node selector names none
    cd_uid: str  # from the request's ComputeDomainChannelConfig; "" without one

    @property
    def key(self) -> Key:
        return (self.driver, self.pool, self.device, "")  # a channel is never shared


def allocated_node(allocation: Obj) -> str:
    """The node a node-local allocation is for: `metadata.name In [node]` in its node selector."""
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(values) == 1:
                return str(values[0])
    return ""


def channels(claim: Obj, driver: str) -> list[Channel]:
    """The claim's allocated devices of `driver` whose binding conditions include ours."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return []
    devices = allocation.get("devices") or {}
    domains: dict[str, str] = {}  # request -> ComputeDomain UID
    for config in devices.get("config") or []:
        opaque = config.get("opaque") or {}
        params = opaque.get("parameters") or {}
        if opaque.get("driver") == driver and params.get("kind") == api.CHANNEL_CONFIG_KIND:
            # No requests (so in the allocations the 1.37.2 scheduler wrote here): it applies to all.
            domains.update(dict.fromkeys(config.get("requests") or [""], str(params.get("domainID", ""))))
    node = allocated_node(allocation)
    return [
        Channel(r["driver"], r["pool"], r["device"], node, _domain(domains, r.get("request", "")))
        for r in devices.get("results") or []
        if r.get("driver") == driver and READY_CONDITION in (r.get("bindingConditions") or [])
    ]


def _domain(domains: Mapping[str, str], request: str) -> str:
    """A config naming no request applies to all (stored as the key ""); a subrequest's parent's counts."""
    return domains.get(request) or domains.get(request.split("/")[0]) or domains.get("", "")


def needs_label(node: Obj | None, cd_uid: str) -> bool:
    """Whether the controller labels the node for the ComputeDomain: it exists and has no such label."""
    return bool(node and cd_uid) and api.COMPUTE_DOMAIN_LABEL not in (node["metadata"].get("labels") or {})


def _condition(kind: str, true: bool, reason: str, message: str) -> Obj:
    return {"type": kind, "status": "True" if true else "False", "reason": reason, "message": message}


def _failed(reason: str, message: str) -> list[Obj]:
    return [
        _condition(READY_CONDITION, False, reason, message),
        _condition(FAILED_CONDITION, True, reason, message),
    ]


def conditions(channel: Channel, cd: Obj | None, node: Obj | None) -> list[Obj]:
    """Our two conditions for the channel (without timestamps), from its ComputeDomain and node."""
    where = f"node {channel.node or '(none)'}"
    meta = (node or {}).get("metadata") or {}
    if failed := (meta.get("annotations") or {}).get(FAILED_ANNOTATION, ""):
        return _failed("DaemonFailed", f"the ComputeDomain daemon on {where} failed: {failed}")
    other = (meta.get("labels") or {}).get(api.COMPUTE_DOMAIN_LABEL, channel.cd_uid)
    if other != channel.cd_uid:
        return _failed("NodeInOtherComputeDomain", f"{where} belongs to ComputeDomain {other}")
    nodes = ((cd or {}).get("status") or {}).get("nodes") or []
    entry = next((n for n in nodes if n.get("name") == channel.node), None)
    status = (entry or {}).get("status") or "not Ready"
    if cd is None:
        ready = (False, "ComputeDomainNotFound", f"no ComputeDomain {channel.cd_uid!r}")
    elif entry is None:
        ready = (False, "DaemonNotStarted", f"no ComputeDomain daemon on {where} yet")
    else:
        ok = status == api.STATUS_READY
        ready = (
            ok,
            "DaemonReady" if ok else "DaemonNotReady",
            f"the ComputeDomain daemon on {where} is {status}",
        )
    return [
        _condition(READY_CONDITION, *ready),
        _condition(FAILED_CONDITION, False, "DaemonNotFailed", f"no daemon failure on {where}"),
    ]
