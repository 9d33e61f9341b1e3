"""The Kubernetes part of NVIDIA's compute-domain-daemon: a node's entry in its ComputeDomainClique.

As `cmd/compute-domain-daemon/` (main 95932046) does it with the ComputeDomainCliques gate:
- main.go `addComputeDomainCliqueLabel`: the daemon pod gets the label
  `resource.nvidia.com/computeDomain.cliqueID=<cliqueID>` first ("" on a node without a fabric, where the
  daemon then only idles);
- cdclique.go `ensureCliqueExists`: the clique `<cdUID>.<cliqueID>` in the driver namespace, labelled with
  the ComputeDomain's UID and the clique ID, the daemon pod an owner;
- `syncDaemonInfoToClique` / `getNextAvailableIndex`: this node's entry `{nodeName, ipAddress, cliqueID,
  index, status}`, inserted with the lowest index no other daemon uses (gaps filled, below
  MAX_NODES_PER_IMEX_DOMAIN, else `no available indices within maxNodesPerIMEXDomain (N)`), status NotReady;
  an existing entry only gets the IP;
- podmanager.go and `updateDaemonStatus`: the entry's status mirrors the pod's readiness (Running and
  condition Ready);
- `removeDaemonInfoFromClique`: on stop, every entry with this daemon's IP goes.

Updates are PUTs carrying the resourceVersion read (upstream: Update through a mutation cache); a conflict
reads again and retries (CONFLICT_ATTEMPTS), as upstream's work queue retries a failed update.

The faults for test authors are node annotations (fakeplugin.faults.daemonfaults): while one is set, this
node's daemon stays NotReady, or has no entry in the clique (the node left it: the controller drops it from
status.nodes) until the annotation goes, when it enters again as a new daemon does (lowest free index, its
status from the pod).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from fakeplugin.apis import computedomain as api
from fakeplugin.faults.daemonfaults import LEFT_CLIQUE_ANNOTATION, NOT_READY_ANNOTATION, node_faults
from fakeplugin.kube import Kube, describe_api_error
from fakeplugin.runtime.informer import Source, list_and_watch
from fakeplugin.runtime.retry import Backoff

log = logging.getLogger(__name__)

Obj = dict[str, Any]
STATE_FILE = "fakeplugin-imex-state"  # in the IMEX directory: what `check` reads instead of nvidia-imex-ctl
READY = "READY\n"  # as `nvidia-imex-ctl -q` prints it
DEFAULT_MAX_NODES = 18  # --max-nodes-per-imex-domain (the controller passes it as MAX_NODES_PER_IMEX_DOMAIN)
CONFLICT_ATTEMPTS = 8


class DaemonError(Exception):
    """A step of the daemon failed; the message names the clique or pod and the step."""


@dataclass(frozen=True)
class Identity:
    """Who the daemon is: its ComputeDomain, clique, node and address; the pod where one runs."""

    cd_uid: str
    clique_id: str  # `<ClusterUUID>.<CliqueId>`, "" without a fabric
    node_name: str
    ip: str
    namespace: str  # the driver's (the daemon pod's): where the cliques are
    pod_name: str = ""
    pod_uid: str = ""
    max_nodes: int = DEFAULT_MAX_NODES
    cd: str = ""  # `<namespace>/<name>` of the ComputeDomain, for the log (COMPUTE_DOMAIN_NAMESPACE, _NAME)

    @property
    def clique(self) -> str:
        return api.clique_name(self.cd_uid, self.clique_id)


def pod_ready(pod: Mapping[str, Any]) -> bool:
    """podmanager.go isPodReady: phase Running and the Ready condition True."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


# -- the entry, pure -----------------------------------------------------------------------------------------


def next_index(daemons: Sequence[Mapping[str, Any]], max_nodes: int) -> int:
    """getNextAvailableIndex: the lowest index no daemon has."""
    used = {d.get("index") for d in daemons}
    index = 0
    while index in used:
        index += 1
    if index >= max_nodes:
        raise DaemonError(f"no available indices within maxNodesPerIMEXDomain ({max_nodes})")
    return index


def with_member(daemons: Sequence[Obj], who: Identity) -> list[Obj] | None:
    """The daemons with this node's entry (new: lowest free index, NotReady; else the IP updated); None when
    nothing changes."""
    mine = next((d for d in daemons if d.get("nodeName") == who.node_name), None)
    if mine is not None and mine.get("ipAddress") == who.ip:
        return None
    if mine is None:
        entry = {
            "nodeName": who.node_name,
            "ipAddress": who.ip,
            "cliqueID": who.clique_id,
            "index": next_index(daemons, who.max_nodes),
            "status": api.STATUS_NOT_READY,
        }
        return [*daemons, entry]
    return [{**d, "ipAddress": who.ip} if d is mine else d for d in daemons]


def with_status(daemons: Sequence[Obj], node_name: str, status: str) -> list[Obj] | None:
    """The daemons with this node's status set; None when unchanged. DaemonError: no entry yet."""
    mine = next((d for d in daemons if d.get("nodeName") == node_name), None)
    if mine is None:
        raise DaemonError("daemon info not yet listed in CDClique (waiting for insertion)")
    if mine.get("status") == status:
        return None
    return [{**d, "status": status} if d is mine else d for d in daemons]


def without(daemons: Sequence[Obj], field: str, value: str) -> list[Obj] | None:
    """The daemons without those whose `field` (ipAddress, nodeName) is `value`; None when there is none."""
    kept = [d for d in daemons if d.get(field) != value]
    return kept if len(kept) != len(daemons) else None


# -- the API side --------------------------------------------------------------------------------------------


class CliqueMember:
    """This daemon's entry in its clique, written through `kube` (fakeplugin.kube.Kube)."""

    def __init__(self, kube: Kube, who: Identity, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._kube, self.who, self._sleep = kube, who, sleep

    def label_pod(self) -> None:
        """addComputeDomainCliqueLabel: the pod's clique ID label (merge patch)."""
        path = f"{_pods_path(self.who.namespace)}/{quote(self.who.pod_name, safe='')}"
        try:
            self._kube.patch(path, {"metadata": {"labels": {api.CLIQUE_ID_LABEL: self.who.clique_id}}})
        except ApiException as e:
            raise DaemonError(
                f"failed to add compute domain clique label to pod: {describe_api_error(e)}"
            ) from e

    def join(self) -> None:
        """The clique exists and lists this node (NotReady when new)."""
        self._ensure_clique()
        self._update(lambda daemons: with_member(daemons, self.who), "insert/update daemon info")
        log.info("daemon of node %s in CDClique %s", self.who.node_name, self.who.clique)

    def set_ready(self, ready: bool) -> None:
        status = api.STATUS_READY if ready else api.STATUS_NOT_READY
        if self._update(lambda daemons: with_status(daemons, self.who.node_name, status), "update status"):
            log.info("Successfully updated daemon info status in CDClique (new status: %s)", status)

    def leave(self, *, by_node: bool = False) -> None:
        """Every entry with this daemon's IP removed (upstream: pod IPs are unique), or with `by_node` this
        node's entry (the emulated daemon's IP is its node's, which local clusters share); an absent clique
        is nothing to do."""
        field, value = ("nodeName", self.who.node_name) if by_node else ("ipAddress", self.who.ip)
        if self._update(
            lambda daemons: without(daemons, field, value), "remove daemon info", missing_ok=True
        ):
            log.info(
                "Successfully removed daemon with %s %s from CDClique %s (from ComputeDomain %s)",
                field,
                value,
                self.who.clique,
                self.who.cd,
            )

    def _ensure_clique(self) -> None:
        clique: Obj = {
            "apiVersion": api.API_VERSION,
            "kind": api.CLIQUE_KIND,
            "metadata": {
                "name": self.who.clique,
                "namespace": self.who.namespace,
                "labels": {
                    api.COMPUTE_DOMAIN_LABEL: self.who.cd_uid,
                    api.CLIQUE_ID_LABEL: self.who.clique_id,
                },
            },
        }
        if self.who.pod_uid:
            clique["metadata"]["ownerReferences"] = [self._owner()]
        try:
            self._kube.create(api.cliques_path(self.who.namespace), clique)
            log.info("Successfully created CDClique '%s'", self.who.clique)
        except ApiException as e:
            if e.status != 409:  # 409: it exists (another daemon of the clique made it)
                raise DaemonError(
                    f"failed to create CDClique '{self.who.clique}': {describe_api_error(e)}"
                ) from e

    def _owner(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.who.pod_name, "uid": self.who.pod_uid}

    def _update(
        self, change: Callable[[list[Obj]], list[Obj] | None], what: str, *, missing_ok: bool = False
    ) -> bool:
        """Read the clique, apply `change` to its daemons, PUT it back; again on a conflict. True when
        written."""
        path = api.clique_path(self.who.namespace, self.who.clique)
        backoff = Backoff(first=0.1, maximum=2.0)
        for _ in range(CONFLICT_ATTEMPTS):
            try:
                clique = self._kube.get(path)
            except ApiException as e:
                if e.status == 404 and missing_ok:
                    return False
                raise DaemonError(f"CDClique '{self.who.clique}': {what}: {describe_api_error(e)}") from e
            daemons = change(list(clique.get("daemons") or []))
            if daemons is None:
                return False
            clique["daemons"] = daemons
            if self.who.pod_uid:
                refs = clique["metadata"].setdefault("ownerReferences", [])
                if not any(r.get("uid") == self.who.pod_uid for r in refs):
                    refs.append(self._owner())
            try:
                self._kube.replace(path, clique)
                return True
            except ApiException as e:
                if e.status != 409:
                    raise DaemonError(f"CDClique '{self.who.clique}': {what}: {describe_api_error(e)}") from e
            self._sleep(backoff.failed())
        raise DaemonError(
            f"CDClique '{self.who.clique}': {what}: still conflicting after {CONFLICT_ATTEMPTS} tries"
        )


class DaemonRun:
    """`compute-domain-daemon run` with a clique, until `stop`: its pod watched (the first event enters the
    node into the clique, each one mirrors the pod's readiness into the entry), its node watched (the
    faults: not ready; left the clique, when the entry goes until the fault does), the state file `check`
    reads (READY while in the clique and without the not-ready fault); at stop the state file and the
    entry go."""

    def __init__(self, kube: Kube, member: CliqueMember, state: Path) -> None:
        self._kube, self._member, self._state = kube, member, state
        self._joined, self._fault, self._left = False, "", ""
        self._pod: Obj | None = None  # the last pod event's object
        self._stopped = False  # under _lock: a watch event after stop writes no state file again
        self._lock = threading.Lock()

    def run(self, stop: threading.Event) -> None:
        who = self._member.who
        self._write_state()
        self._watch(Source(_pods_path(who.namespace), name=who.pod_name), self._on_pod, stop)
        self._watch(Source("/api/v1/nodes", name=who.node_name), self._on_node, stop)
        stop.wait()
        with self._lock:
            self._stopped = True
            self._state.unlink(missing_ok=True)
        try:
            self._member.leave()
        except DaemonError as e:
            log.error("Failed to remove daemon info from CDClique during shutdown: %s", e)

    def _on_pod(self, pod: Obj) -> None:
        with self._lock:
            if self._stopped:
                return
            self._pod = pod
            self._sync()

    def _on_node(self, node: Obj) -> None:
        with self._lock:
            if self._stopped:
                return
            fault, left = node_faults(node)
            for key, before, now in (
                (NOT_READY_ANNOTATION, self._fault, fault),
                (LEFT_CLIQUE_ANNOTATION, self._left, left),
            ):
                if now != before:
                    log.info("node %s: %s=%r", self._member.who.node_name, key, now)
            left_changed = left != self._left
            self._fault, self._left = fault, left
            # Before the first pod event nothing has entered (that event does); node updates without a
            # change of the left-clique fault (heartbeats) cost no clique read.
            if self._pod is None or not left_changed:
                self._write_state()
            else:
                self._sync()

    def _sync(self) -> None:
        """Under _lock: the entry as the faults and the pod say (absent while left, else the pod's
        readiness), then the state file."""
        if self._left and self._joined:
            self._member.leave()
            self._joined = False
        elif not self._left:
            if not self._joined:
                self._member.join()
                self._joined = True
            self._member.set_ready(pod_ready(self._pod or {}))
        self._write_state()

    def _write_state(self) -> None:
        text = READY if self._joined and not self._fault else "NOT READY\n"
        self._state.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._state.with_name(self._state.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(self._state)

    def _watch(self, source: Source, handle: Callable[[Obj], None], stop: threading.Event) -> None:
        def loop() -> None:
            list_and_watch(
                self._kube,
                source,
                stop=stop,
                on_list=lambda items: [handle(o) for o in items] and None,
                on_event=lambda kind, o: None if kind == "DELETED" else handle(o),
                synced=threading.Event(),
            )

        threading.Thread(target=loop, name=f"cd-daemon {source.path}", daemon=True).start()


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods"
