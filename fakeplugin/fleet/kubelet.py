"""The DRA part of a kubelet, for every simulated node at once: one pod watch and a work queue.

A pod with claims bound to a simulated node is queued; a worker prepares it (fleet.poddra), on which kwok
makes it Running (fleet.stages). A failure is retried with backoff (the kubelet retries on pod sync). A
pod that ended (Succeeded or Failed: its containers will not run again) or is deleting is unprepared,
claims other pods of its node still use excepted, on which kwok deletes a deleting one; a pod deleted
without waiting (forced) is unprepared all the same. What no pod of this process's memory covers (pods
gone while the fleet was down, claims deleted) is the reconcile loop's (fleet.reconcile), woken by every
list of the pods (`relisted`).

Invariants: a pod is handled by one worker at a time (the queue holds each pod once); a pod is known from
its first event with claims on a served node until it is unprepared and gone (or deleting and
annotated UNPREPARED): nothing of it is kept after.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from fakeplugin.fleet import stages
from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.poddra import PodDRA
from fakeplugin.fleet.reconcile import claims_in_use
from fakeplugin.runtime import retry
from fakeplugin.runtime.informer import Source, list_and_watch

log = logging.getLogger(__name__)

PODS = "/api/v1/pods"
# A watch event as the API server encodes it: {"type":"MODIFIED","object":{...}}, keys unspaced.
_EVENT_TYPE = re.compile(r'\{"type":"(ADDED|MODIFIED|DELETED)",')
_NODE_NAME = re.compile(r'"nodeName":"([^"\\]*)"')
RETRY_FIRST, RETRY_MAX = 2.0, 30.0  # seconds between attempts for a pod whose claims failed


@dataclass
class _Pod:
    obj: Obj
    failures: int = 0


class FleetKubelet:
    def __init__(self, kube: FleetKube, dra: PodDRA, *, threads: int = 8) -> None:
        self._kube = kube
        self._dra = dra
        self._mutex = threading.Lock()
        self._pods: dict[str, _Pod] = {}  # pod UID → what we know, for pods with claims on the fleet's nodes
        self._on_node: dict[str, set[str]] = defaultdict(set)  # node → UIDs of those pods (none: no key)
        self._queued: set[str] = set()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fleet-kubelet")
        self.synced = threading.Event()
        self.relisted = threading.Event()  # set after every list of the pods

    def run(self, stop: threading.Event) -> None:
        def on_event(kind: str, obj: Obj) -> None:
            if kind == "DELETED":
                self._gone(obj)
            else:
                self._seen(obj)

        list_and_watch(
            self._kube,
            Source(PODS, keep=self._may_matter, resume=True),
            stop=stop,
            on_list=self._resync,
            on_event=on_event,
            synced=self.synced,
        )
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _may_matter(self, line: str) -> bool:
        """Whether a pod watch event, undecoded, may change what the fleet does: every pod of the cluster
        comes through this watch (of every shard's nodes, and claimless ones), and decoding each was a
        third of a fleet's GIL time in a wave (issue 20). Skipped, as `_seen` and `_gone` would ignore
        them: a pod without claims, and, but for DELETED (a pod we know may be on a node no longer
        served), a pod not bound yet or bound to a node that is not the fleet's. Anything else (ERROR,
        BOOKMARK, a line the API server's encoder did not write as expected) is decoded."""
        kind = _EVENT_TYPE.match(line)
        if kind is None:
            return True
        if '"resourceClaims":' not in line and '"extendedResourceClaimStatus":' not in line:
            return False  # pods with claims have them unescaped in spec or status
        if kind.group(1) == "DELETED":
            return True
        # spec.nodeName, omitted while unbound; in any other field (an annotation, say) it is escaped
        nodes = _NODE_NAME.findall(line)
        return len(nodes) > 1 or (len(nodes) == 1 and bool(self._dra.plugins(nodes[0])))

    def _resync(self, pods: list[Obj]) -> None:
        live = {p["metadata"]["uid"] for p in pods}
        with self._mutex:
            vanished = [p.obj for uid, p in self._pods.items() if uid not in live]
        for obj in vanished:
            self._gone(obj)
        for obj in pods:
            self._seen(obj)
        self.relisted.set()

    def pods_on(self, node: str) -> list[Obj]:
        """The pods with claims bound to `node` the fleet knows now (slim copies, `gone` when deleted)."""
        with self._mutex:
            return [self._pods[u].obj for u in self._on_node.get(node, ())]

    def _seen(self, obj: Obj) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        status = obj.get("status") or {}
        if not node or not (obj["spec"].get("resourceClaims") or status.get("extendedResourceClaimStatus")):
            return
        if not self._dra.plugins(node) or (_ended(obj) and not _wants_work(obj)):
            return  # not ours, or ended and unprepared: nothing more to do for it
        uid = obj["metadata"]["uid"]
        obj = _slim(obj)
        if obj["metadata"].get("deletionTimestamp") and not _wants_work(obj):
            self._forget(obj)  # unprepared: only kwok's deletion is left, and nothing of it is in use
            return
        with self._mutex:
            self._pods.setdefault(uid, _Pod(obj)).obj = obj
            self._on_node[node].add(uid)
        if _wants_work(obj):
            self._enqueue(uid)

    def _gone(self, obj: Obj) -> None:
        uid = obj["metadata"]["uid"]
        with self._mutex:
            pod = self._pods.get(uid)
            if pod is None:
                return
            pod.obj = {**_slim(obj), "gone": True}
        self._enqueue(uid)

    def _enqueue(self, uid: str, delay: float = 0.0) -> None:
        with self._mutex:
            if uid in self._queued:
                return
            self._queued.add(uid)
        if delay:
            timer = threading.Timer(delay, self._submit, args=(uid,))
            timer.daemon = True
            timer.start()
        else:
            self._submit(uid)

    def _submit(self, uid: str) -> None:
        with contextlib.suppress(RuntimeError):  # shut down
            self._pool.submit(self._work, uid)

    def _work(self, uid: str) -> None:
        with self._mutex:
            self._queued.discard(uid)
            pod = self._pods.get(uid)
        if pod is None:
            return
        obj = pod.obj
        try:
            if obj.get("gone") or obj["metadata"].get("deletionTimestamp") or _ended(obj):
                done = self._dra.unprepare(obj, self._in_use_by_others(obj))
                if done:
                    self._forget(obj)
            else:
                done = not _wants_work(obj) or self._dra.prepare(obj)
        except Exception:  # a bug: logged with its trace, retried like a failure
            meta = obj["metadata"]
            log.exception("pod %s/%s: unexpected failure", meta["namespace"], meta["name"])
            done = False
        if done:
            pod.failures = 0
            return
        pod.failures += 1
        self._enqueue(uid, retry.delay(pod.failures, RETRY_FIRST, RETRY_MAX))

    def _in_use_by_others(self, obj: Obj) -> set[str]:
        """Claims other live pods of the node, in the pod's namespace, use."""
        meta = obj["metadata"]
        others = [o for o in self.pods_on(obj["spec"]["nodeName"]) if o["metadata"]["uid"] != meta["uid"]]
        return {name for namespace, name in claims_in_use(others) if namespace == meta["namespace"]}

    def _forget(self, obj: Obj) -> None:
        uid, node = obj["metadata"]["uid"], obj["spec"]["nodeName"]
        with self._mutex:
            self._pods.pop(uid, None)
            uids = self._on_node.get(node)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._on_node[node]


def _ended(obj: Obj) -> bool:
    return (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _wants_work(obj: Obj) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    if obj["metadata"].get("deletionTimestamp") or _ended(obj):
        return annotations.get(stages.UNPREPARED) != "true"
    return annotations.get(stages.PREPARED) != "true" and (obj.get("status") or {}).get("phase") in (
        None,
        "Pending",
    )


def _slim(obj: Obj) -> Obj:
    """What the fleet reads of a pod (thousands are held at once): its identity, annotations and deletion,
    node, claims, containers' names, env and claim references, and its claim statuses and phase."""
    meta, spec, status = obj["metadata"], obj["spec"], obj.get("status") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("namespace", "name", "uid", "annotations", "deletionTimestamp") if k in meta
        },
        "spec": {
            "nodeName": spec["nodeName"],
            "resourceClaims": spec.get("resourceClaims") or [],
            "containers": [
                {k: c[k] for k in ("name", "env", "resources") if k in c}
                for c in spec.get("containers") or []
            ],
        },
        "status": {
            k: status[k]
            for k in ("phase", "resourceClaimStatuses", "extendedResourceClaimStatus")
            if k in status
        },
    }
