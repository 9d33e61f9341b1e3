"""`serve --plugin compute-domains --emulate-daemon`: the plugin does the daemon's Kubernetes part itself,
for clusters whose container runtime runs no container (the local cluster's fake CRI).

NVIDIA's daemon pod, once its daemon claim is prepared, labels itself with its clique ID, enters its node
into the clique `<cdUID>.<cliqueID>` and mirrors its readiness there; when it stops, it removes its entry
(drivers.computedomain.daemon). Here a daemon claim's Prepare does the same for the pod the claim is
reserved for: label, entry, Ready (NotReady while the node has the not-ready fault; no entry while it has
the left-clique fault, until that goes); its Unprepare removes the node's entry. The entry's IP is the
node's InternalIP [U: a daemon pod's IP is its own; the emulated daemon has no pod IP at Prepare time,
before the pod's sandbox exists]; as a local cluster's nodes share one address, the entry is removed by
node name, not by IP as upstream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fakeplugin.drivers.computedomain.daemon import DEFAULT_MAX_NODES, CliqueMember, DaemonError, Identity
from fakeplugin.drivers.computedomain.domains import DomainError
from fakeplugin.faults.daemonfaults import left_clique_fault, not_ready_fault
from fakeplugin.kube import Kube

log = logging.getLogger(__name__)

Obj = dict[str, Any]
WHERE = "emulated compute-domain-daemon"


def internal_ip(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


class EmulatedDaemons:
    """The daemons of one node's prepared daemon claims, by ComputeDomain UID. `node()`: the node object as
    last seen (its InternalIP and the fault); `clique_id()`: the node's now."""

    def __init__(
        self,
        kube: Kube,
        *,
        node_name: str,
        namespace: str,
        node: Callable[[], Mapping[str, Any]],
        clique_id: Callable[[], str],
        max_nodes: int = DEFAULT_MAX_NODES,
    ) -> None:
        self._kube, self._node_name, self._namespace = kube, node_name, namespace
        self._node, self._clique_id, self._max_nodes = node, clique_id, max_nodes
        self._members: dict[str, CliqueMember] = {}
        self._lock = threading.Lock()

    def started(self, cd_uid: str, reserved_for: Sequence[Mapping[str, Any]]) -> None:
        """A daemon claim of `cd_uid` prepared for its pod: label it, enter the node, Ready unless faulted.
        DomainError (the Prepare fails, the kubelet retries) when a step fails."""
        pod = next((r for r in reserved_for if r.get("resource") == "pods"), {})
        member = CliqueMember(
            self._kube, self._identity(cd_uid, str(pod.get("name", "")), str(pod.get("uid", "")))
        )
        try:
            if member.who.pod_name:
                member.label_pod()
            if not member.who.clique_id:
                log.info("%s %s: no cliqueID: no clique entry", WHERE, cd_uid)
                return
            self._sync(member)
        except DaemonError as e:
            raise DomainError(f"{WHERE}: {e}") from e
        with self._lock:
            self._members[cd_uid] = member

    def stopped(self, cd_uid: str) -> None:
        """The daemon claim of `cd_uid` unprepared: the node's entry removed."""
        with self._lock:
            member = self._members.pop(cd_uid, None)
        member = member or CliqueMember(self._kube, self._identity(cd_uid))
        if not member.who.clique_id:
            return
        try:
            member.leave(by_node=True)
        except DaemonError as e:
            raise DomainError(f"{WHERE}: {e}") from e

    def node_changed(self) -> None:
        """The node's faults changed: every daemon's entry follows them (errors logged; the next change or
        Prepare tries again)."""
        with self._lock:
            members = list(self._members.values())
        for member in members:
            try:
                self._sync(member)
            except DaemonError as e:
                log.error("%s %s: %s", WHERE, member.who.cd_uid, e)

    def _sync(self, member: CliqueMember) -> None:
        """The entry as the node's faults say: absent while it left the clique, else in it, Ready unless
        not ready."""
        node = self._node()
        if left_clique_fault(node):
            member.leave(by_node=True)
            return
        member.join()
        member.set_ready(not not_ready_fault(node))

    def _identity(self, cd_uid: str, pod_name: str = "", pod_uid: str = "") -> Identity:
        return Identity(
            cd_uid=cd_uid,
            clique_id=self._clique_id(),
            node_name=self._node_name,
            ip=internal_ip(self._node()),
            namespace=self._namespace,
            pod_name=pod_name,
            pod_uid=pod_uid,
            max_nodes=self._max_nodes,
        )
