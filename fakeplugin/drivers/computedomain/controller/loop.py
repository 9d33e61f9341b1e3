"""The controller's edges: caches fed by list + watch (runtime.informer), the actions of `reconcile`
written to the API, the status sync every 2 s (cdstatus.go `cdStatusSyncInterval`) and the cleanup of
objects whose ComputeDomain is gone (at start, every 10 minutes, and when a new ComputeDomain appears:
cleanup.go, node.go `RemoveStaleComputeDomainLabelsAsync`). With --binding-conditions (ours) the status
sync also answers the binding conditions of allocated channel claims (binding.py), from caches of every
ResourceClaim and Node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from kubernetes.client.exceptions import ApiException

from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.controller import binding, reconcile, status
from fakeplugin.drivers.computedomain.controller.reconcile import Mode, Owned
from fakeplugin.kube import NODES, Kube, describe_api_error
from fakeplugin.runtime import claimstatus
from fakeplugin.runtime.informer import Source, list_and_watch

log = logging.getLogger(__name__)

Obj = dict[str, Any]
STATUS_SYNC_SECONDS = 2.0
CLEANUP_SECONDS = 600.0
RESOURCE_V1 = "/apis/resource.k8s.io/v1"
TEMPLATES = f"{RESOURCE_V1}/resourceclaimtemplates"
CLAIMS = f"{RESOURCE_V1}/resourceclaims"
OURS = api.COMPUTE_DOMAIN_LABEL  # label selector: the label exists


class Cache:
    """One informer's objects by namespace/name; `changed` is set on every list and event. Our own writes
    go in at once (as NVIDIA's mutation caches), so the next pass does not create an object twice."""

    def __init__(self, kind: str, source: Source, changed: threading.Event) -> None:
        self.kind, self.source, self._changed = kind, source, changed
        self.synced = threading.Event()
        self._objects: dict[str, Obj] = {}
        self._lock = threading.Lock()

    def run(self, kube: Kube, stop: threading.Event) -> None:
        list_and_watch(
            kube, self.source, stop=stop, on_list=self._replace, on_event=self.event, synced=self.synced
        )

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def labelled(self, cd_uid: str) -> list[Obj]:
        return [o for o in self.items() if (o["metadata"].get("labels") or {}).get(OURS) == cd_uid]

    def event(self, kind: str, obj: Obj) -> None:
        """A watch event, or our own write's answer (which may arrive after the watch's newer events: an
        older resourceVersion than the cached one is dropped). An object marked for deletion without
        finalizers is gone: the answer to the write that removed its last finalizer."""
        obj.setdefault("kind", self.kind)  # list items of built-in types come without
        meta = obj["metadata"]
        with self._lock:
            if kind == "DELETED" or (meta.get("deletionTimestamp") and not meta.get("finalizers")):
                self._objects.pop(_key(obj), None)
            elif _version(meta) >= _version(self._objects.get(_key(obj), {}).get("metadata", {})):
                self._objects[_key(obj)] = obj
        self._changed.set()

    def _replace(self, items: list[Obj]) -> None:
        with self._lock:
            self._objects = {_key(o): {"kind": self.kind, **o} for o in items}
        self._changed.set()


class Controller:
    """The ComputeDomains of every namespace, with their objects in the driver's namespace."""

    def __init__(self, kube: Kube, mode: Mode) -> None:
        self._kube, self._mode = kube, mode
        ns = mode.daemon.namespace
        self._changed = threading.Event()
        changed = self._changed

        def cache(kind: str, path: str, selector: str = "") -> Cache:
            return Cache(kind, Source(path, label_selector=selector), changed)

        self.cds = cache(api.COMPUTE_DOMAIN_KIND, api.compute_domains_path())
        self.templates = cache("ResourceClaimTemplate", TEMPLATES, OURS)
        self.daemon_sets = cache("DaemonSet", _PLURALS["DaemonSet"](ns), OURS)
        self.pods = cache("Pod", _namespaced("/api/v1", "pods")(ns), OURS)
        self.cliques = cache(api.CLIQUE_KIND, api.cliques_path(ns))
        self.claims = cache("ResourceClaim", CLAIMS)
        self.nodes = cache("Node", NODES)
        self._known: set[str] = set()

    def _caches(self) -> list[Cache]:
        caches = [self.cds, self.templates]
        if not self._mode.host_managed:
            caches += [self.daemon_sets, self.pods] + ([self.cliques] if self._mode.cliques_gate else [])
            caches += [self.claims, self.nodes] if self._mode.binding_conditions else []
        return caches

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: reconcile on every change, sync status every 2 s, clean up every 10 minutes."""
        for c in self._caches():
            threading.Thread(target=c.run, args=(self._kube, stop), name="cd-informer", daemon=True).start()
        for c in self._caches():
            while not c.synced.wait(0.5):
                if stop.is_set():
                    return
        log.info("ComputeDomain controller synced; driver namespace %s", self._mode.daemon.namespace)
        next_sync = next_cleanup = time.monotonic()
        while not stop.is_set():
            self._changed.clear()
            self.reconcile_all()
            now = time.monotonic()
            if now >= next_cleanup:
                self.clean_up()
                next_cleanup = now + CLEANUP_SECONDS
            if now >= next_sync and not self._mode.host_managed:
                self.sync_status()
                next_sync = now + STATUS_SYNC_SECONDS
            self._changed.wait(max(0.0, min(next_sync, next_cleanup) - time.monotonic()))
            stop.wait(0.05)  # a burst of events makes one pass

    def owned(self, cd_uid: str) -> Owned:
        templates = self.templates.labelled(cd_uid)

        def target(t: str) -> tuple[Obj, ...]:
            return tuple(o for o in templates if o["metadata"]["labels"].get(api.TARGET_LABEL) == t)

        return Owned(
            target(api.TARGET_WORKLOAD), target(api.TARGET_DAEMON), tuple(self.daemon_sets.labelled(cd_uid))
        )

    def reconcile_all(self) -> None:
        cds = self.cds.items()
        uids = {cd["metadata"]["uid"] for cd in cds}
        if uids - self._known and not self._mode.host_managed:
            self._clean_node_labels(uids)
        self._known = uids
        for cd in cds:
            self._apply(reconcile.plan(cd, self.owned(cd["metadata"]["uid"]), self._mode), _describe(cd))

    def clean_up(self) -> None:
        """Objects and node labels of ComputeDomains that are gone."""
        uids = {cd["metadata"]["uid"] for cd in self.cds.items()}
        objs = self.templates.items() + (self.daemon_sets.items() if not self._mode.host_managed else [])
        for uid in sorted({(o["metadata"].get("labels") or {}).get(OURS, "") for o in objs} - uids - {""}):
            log.info("Cleanup: stale objects found for ComputeDomain '%s'", uid)
            steps = reconcile.teardown(uid, self.owned(uid), None, host_managed=self._mode.host_managed)
            self._apply(steps, f"leftovers of ComputeDomain {uid}")
        if not self._mode.host_managed:
            self._clean_node_labels(uids)

    def sync_status(self) -> None:
        """status.nodes (and with them the global status) of every ComputeDomain; stale clique entries."""
        pods = self.pods.items()
        if self._mode.cliques_gate:
            for clique in self.cliques.items():
                if stale := status.stale_daemons(clique, pods):
                    self._drop_daemons(clique, stale)
        for cd in self.cds.items():
            uid = cd["metadata"]["uid"]
            cliques = self.cliques.labelled(uid) if self._mode.cliques_gate else []
            new = status.status_update(
                cd, cliques, self.pods.labelled(uid), cliques_gate=self._mode.cliques_gate
            )
            if new is not None:
                self._guard(lambda cd=cd, new=new: self._patch_status(cd, new), f"status of {_describe(cd)}")
        if self._mode.binding_conditions:
            self.sync_binding()

    def sync_binding(self) -> None:
        """Each allocated channel claim's binding conditions, after labelling its node (binding.py)."""
        cds = {cd["metadata"]["uid"]: cd for cd in self.cds.items()}
        nodes = {n["metadata"]["name"]: n for n in self.nodes.items()}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for claim in self.claims.items():
            wanted = {}
            for ch in binding.channels(claim, api.DRIVER_NAME):
                node = nodes.get(ch.node)
                if binding.needs_label(node, ch.cd_uid):
                    self._guard(lambda n=node, ch=ch: self._label_node(n, ch.cd_uid), f"label of {ch.node}")
                wanted[ch.key] = {"conditions": binding.conditions(ch, cds.get(ch.cd_uid), node)}
            devices = claimstatus.status_devices(claim, wanted, now) if wanted else None
            if devices is not None:
                self._guard(
                    lambda c=claim, d=devices: self._put_claim_status(c, d), f"status of {_describe(claim)}"
                )

    # -- writes -------------------------------------------------------------------------------------------

    def _apply(self, actions: Iterable[reconcile.Action], what: str) -> None:
        for action in actions:
            if isinstance(action, reconcile.Wait):
                log.debug("%s: waiting: %s", what, action.reason)
                return
            if not self._guard(lambda a=action: self._do(a), what):
                return

    def _guard(self, write: Any, what: str) -> bool:
        try:
            write()
            return True
        except ApiException as exc:  # tried again on the next pass
            log.warning("%s: %s", what, describe_api_error(exc))
            return False

    def _do(self, action: reconcile.Action) -> None:
        match action:
            case reconcile.Create(obj):
                try:
                    created = self._kube.create(_collection(obj), obj)
                except ApiException as exc:
                    if exc.status != 409:  # AlreadyExists: our cache was behind
                        raise
                    return
                self._cache_of(obj).event("ADDED", created)
                log.info(
                    "created %s %s/%s", obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
                )
            case reconcile.Delete(obj):
                self._kube.delete(_path(obj))
            case reconcile.AddFinalizer(obj):
                self._set_finalizers(obj, [*(obj["metadata"].get("finalizers") or []), api.FINALIZER])
            case reconcile.RemoveFinalizer(obj):
                self._set_finalizers(obj, [f for f in obj["metadata"]["finalizers"] if f != api.FINALIZER])
            case reconcile.SetStatus(cd, value):
                self._patch_status(cd, {"status": value})
            case reconcile.RemoveNodeLabels(uid):
                self._remove_node_labels(f"{OURS}={uid}")

    def _set_finalizers(self, obj: Obj, finalizers: list[str]) -> None:
        """An update of the whole object as read (upstream: Update), its resourceVersion a precondition. Not a
        merge patch: the API server re-encodes the object for one, and a ResourceClaimTemplate's opaque
        parameters (raw JSON, kept as sent) then differ in their bytes: `spec: field is immutable` (seen on
        1.35; the cause inferred)."""
        body = {**obj, "apiVersion": _API_VERSIONS[obj["kind"]]}
        body["metadata"] = {**obj["metadata"], "finalizers": finalizers}
        updated = self._kube.replace(_path(obj), body)
        self._cache_of(obj).event("MODIFIED", updated)

    def _patch_status(self, cd: Obj, new: Obj) -> None:
        updated = self._kube.patch(f"{_path(cd)}/status", {"status": new})
        self.cds.event("MODIFIED", updated)
        log.info(
            "%s: status %s, %d node(s)",
            _describe(cd),
            updated["status"].get("status"),
            len(updated["status"].get("nodes") or []),
        )

    def _label_node(self, node: Obj, cd_uid: str) -> None:
        meta = node["metadata"]
        body = {"metadata": {"resourceVersion": meta["resourceVersion"], "labels": {OURS: cd_uid}}}
        self.nodes.event("MODIFIED", self._kube.patch(f"{NODES}/{quote(meta['name'], safe='')}", body))
        log.info("added label %s=%s to node %s (binding conditions)", OURS, cd_uid, meta["name"])

    def _put_claim_status(self, claim: Obj, devices: list[Obj]) -> None:
        """status.devices of the claim, as read (runtime.claimstatus.put_devices: a PUT, not a patch; the
        scheduler writes the same status: a conflict is tried again on the next sync)."""
        self.claims.event("MODIFIED", claimstatus.put_devices(self._kube.replace, claim, devices))
        log.info(
            "%s: binding conditions %s",
            _describe(claim),
            ", ".join(
                f"{c['type']}={c['status']} ({c['reason']})"
                for d in devices
                for c in d.get("conditions") or []
            ),
        )

    def _drop_daemons(self, clique: Obj, nodes: list[str]) -> None:
        log.info("CliqueCleanup: removing stale daemon entries from clique %s: %s", _describe(clique), nodes)
        kept = [d for d in clique.get("daemons") or [] if d.get("nodeName") not in nodes]
        body = {
            "metadata": {"resourceVersion": clique["metadata"]["resourceVersion"]},
            "daemons": kept or None,
        }
        self._guard(
            lambda: self.cliques.event("MODIFIED", self._kube.patch(_path(clique), body)), "clique cleanup"
        )

    def _remove_node_labels(self, selector: str) -> None:
        nodes, _ = self._kube.list(NODES, label_selector=selector)
        for node in nodes:
            meta = {"resourceVersion": node["metadata"]["resourceVersion"], "labels": {OURS: None}}
            self._kube.patch(f"{NODES}/{quote(node['metadata']['name'], safe='')}", {"metadata": meta})
            log.info(
                "removed label %s=%s from node %s",
                OURS,
                node["metadata"]["labels"][OURS],
                node["metadata"]["name"],
            )

    def _clean_node_labels(self, uids: set[str]) -> None:
        """Node labels naming a ComputeDomain that does not exist (a channel claim prepared after the
        ComputeDomain's teardown removed the labels)."""
        selector = f"{OURS},{OURS} notin ({','.join(sorted(uids))})" if uids else OURS
        self._guard(lambda: self._remove_node_labels(selector), "stale node labels")

    def _cache_of(self, obj: Obj) -> Cache:
        return {
            "ResourceClaimTemplate": self.templates,
            "DaemonSet": self.daemon_sets,
            api.COMPUTE_DOMAIN_KIND: self.cds,
            api.CLIQUE_KIND: self.cliques,
        }[obj["kind"]]


def _namespaced(prefix: str, plural: str) -> Callable[[str], str]:
    return lambda ns: f"{prefix}/namespaces/{quote(ns, safe='')}/{plural}"


_PLURALS: dict[str, Callable[[str], str]] = {
    "ResourceClaimTemplate": _namespaced(RESOURCE_V1, "resourceclaimtemplates"),
    "DaemonSet": _namespaced("/apis/apps/v1", "daemonsets"),
    api.COMPUTE_DOMAIN_KIND: api.compute_domains_path,
    api.CLIQUE_KIND: api.cliques_path,
}


_API_VERSIONS = {
    "ResourceClaimTemplate": "resource.k8s.io/v1",
    "DaemonSet": "apps/v1",
    api.COMPUTE_DOMAIN_KIND: api.API_VERSION,
    api.CLIQUE_KIND: api.API_VERSION,
}


def _collection(obj: Obj) -> str:
    return _PLURALS[obj["kind"]](obj["metadata"]["namespace"])


def _path(obj: Obj) -> str:
    return f"{_collection(obj)}/{quote(obj['metadata']['name'], safe='')}"


def _version(meta: Obj) -> int:
    """resourceVersion as an integer (etcd's revision, as NVIDIA's IntegerResourceVersionMutationCache
    compares them); 0 when absent or not a number."""
    version = str(meta.get("resourceVersion", ""))
    return int(version) if version.isdigit() else 0


def _key(obj: Obj) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _describe(obj: Obj) -> str:
    return f"{obj.get('kind', 'object')} {_key(obj)}"
