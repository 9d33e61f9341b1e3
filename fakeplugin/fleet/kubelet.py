"""The DRA part of a kubelet, for every simulated node: prepare a pod's claims before it may run,
unprepare them when it goes (wire-protocol.md §6.3, §6.4), with kwok moving the pods (fleet.stages).

One pod watch serves the fleet. A pod bound to a simulated node is queued; a worker prepares its claims
with that node's Preparer, writes what each container would get (fleet.containers), then annotates the
pod PREPARED, on which kwok makes it Running. A failure gives the pod the kubelet's event and is retried
with backoff (the kubelet retries on pod sync). A deleting pod is unprepared (claims that no other pod
of the node still uses), then annotated UNPREPARED, on which kwok deletes it.

Invariants: a pod is handled by one worker at a time (the queue holds each pod once); a pod is never
annotated PREPARED before every claim's CDI spec is on disk.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from fakeplugin.fleet import podclaims, stages
from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.containers import write_record
from fakeplugin.kube import describe_api_error
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.prepare.preparer import Preparer

log = logging.getLogger(__name__)

PODS = "/api/v1/pods"
WATCH_SECONDS = 300
RETRY_FIRST, RETRY_MAX = 2.0, 30.0  # seconds between attempts for a pod whose claims failed


@dataclass
class _Pod:
    obj: Obj
    prepared: dict[str, ClaimRef] = field(default_factory=dict)  # ResourceClaim name → what we prepared
    failures: int = 0


class FleetKubelet:
    """`preparer(node)`: the node's Preparer, or None when the node is not one of the fleet's;
    `containers_dir(node)`, `cdi_root(node)`: where the node keeps container records and CDI specs."""

    def __init__(
        self,
        kube: FleetKube,
        *,
        preparer: Callable[[str], Preparer | None],
        containers_dir: Callable[[str], Path],
        cdi_root: Callable[[str], Path],
        workers: int = 8,
    ) -> None:
        self._kube = kube
        self._preparer = preparer
        self._containers_dir = containers_dir
        self._cdi_root = cdi_root
        self._pods: dict[str, _Pod] = {}  # pod UID → what we know, for pods on the fleet's nodes
        self._mutex = threading.Lock()
        self._queued: set[str] = set()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="fleet-kubelet")
        self._fetched = threading.local()  # claims the worker already read, for the Preparer's get_claim
        self.synced = threading.Event()

    # -- the Preparer's claim reads ---------------------------------------------------------------------

    def get_claim(self, namespace: str, name: str) -> Obj:
        """A claim this worker read a moment ago (checked against the pod), else a fresh GET."""
        fetched = getattr(self._fetched, "claims", {})
        claim = fetched.get((namespace, name))
        return claim if claim is not None else self._kube.get_claim(namespace, name)

    # -- the pod watch -----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                pods, version = self._kube.list(PODS)
                self._resync(pods)
                self.synced.set()
                backoff = 1.0
                for event in self._kube.watch(PODS, resource_version=version, timeout_seconds=WATCH_SECONDS):
                    if stop.is_set():
                        return
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        self._gone(event["object"])
                    else:
                        self._seen(event["object"])
            except Exception as exc:  # never fatal: list again, as an informer does
                log.warning("watching pods failed: %s; retrying in %.0f s", describe_api_error(exc), backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, RETRY_MAX)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _resync(self, pods: list[Obj]) -> None:
        live = {p["metadata"]["uid"] for p in pods}
        with self._mutex:
            vanished = [p.obj for uid, p in self._pods.items() if uid not in live]
        for obj in vanished:
            self._gone(obj)
        for obj in pods:
            self._seen(obj)

    def _seen(self, obj: Obj) -> None:
        node = (obj.get("spec") or {}).get("nodeName")
        if not node or not (obj["spec"].get("resourceClaims") or _extended(obj)):
            return
        if self._preparer(node) is None:
            return
        uid = obj["metadata"]["uid"]
        with self._mutex:
            pod = self._pods.setdefault(uid, _Pod(obj))
            pod.obj = obj
        if self._wants_work(obj):
            self._enqueue(uid)

    def _gone(self, obj: Obj) -> None:
        """Deleted without waiting for us (forced): unprepare all the same, as the kubelet's reconcile
        does."""
        uid = obj["metadata"]["uid"]
        with self._mutex:
            pod = self._pods.get(uid)
            if pod is None:
                return
            pod.obj = {**obj, "gone": True}
        self._enqueue(uid)

    @staticmethod
    def _wants_work(obj: Obj) -> bool:
        annotations = obj["metadata"].get("annotations") or {}
        if obj["metadata"].get("deletionTimestamp"):
            return annotations.get(stages.UNPREPARED) != "true"
        return annotations.get(stages.PREPARED) != "true" and obj.get("status", {}).get("phase") in (
            None,
            "Pending",
        )

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
            if obj.get("gone") or obj["metadata"].get("deletionTimestamp"):
                done = self._unprepare(pod)
            elif self._wants_work(obj):
                done = self._prepare(pod)
            else:
                done = True
        except Exception:  # a bug: logged with its trace, retried like a failure
            log.exception(
                "pod %s/%s: unexpected failure", obj["metadata"]["namespace"], obj["metadata"]["name"]
            )
            done = False
        if done:
            pod.failures = 0
            return
        pod.failures += 1
        self._enqueue(uid, min(RETRY_FIRST * 2 ** (pod.failures - 1), RETRY_MAX))

    # -- prepare -----------------------------------------------------------------------------------------

    def _prepare(self, pod: _Pod) -> bool:
        obj = pod.obj
        meta, node = obj["metadata"], obj["spec"]["nodeName"]
        preparer = self._preparer(node)
        assert preparer is not None
        claims = podclaims.pod_claims(obj)
        if claims.pending:
            return True  # the pod's next update (its claim statuses) queues it again
        fetched: dict[tuple[str, str], Obj] = {}
        refs: list[ClaimRef] = []
        for claim_name in dict.fromkeys(claims.names.values()):
            try:
                claim = self._kube.get_claim(meta["namespace"], claim_name)
            except Exception as exc:
                return self._failed(obj, node, claim_name, f"retrieve claim: {describe_api_error(exc)}")
            reserved = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
            if meta["uid"] not in reserved:
                message = (
                    f"pod {meta['namespace']}/{meta['name']} is not allowed to use ResourceClaim {claim_name}"
                )
                return self._failed(obj, node, claim_name, message, wrapped=False)
            fetched[(meta["namespace"], claim_name)] = claim
            refs.append(ClaimRef(meta["namespace"], claim["metadata"]["uid"], claim_name))
        self._fetched.claims = fetched
        try:
            results = preparer.prepare(refs)
        finally:
            self._fetched.claims = {}
        by_name: dict[str, PrepareResult] = {}
        for ref in refs:
            result = results[ref.uid]
            if result.error:
                return self._failed(obj, node, ref.name, result.error)
            by_name[ref.name] = result
            pod.prepared[ref.name] = ref
        for container in obj["spec"].get("containers") or []:
            ids = podclaims.container_cdi_devices(obj, container, by_name)
            write_record(self._containers_dir(node), obj, container, ids, self._cdi_root(node))
        return self._annotate(obj, stages.PREPARED)

    def _failed(self, obj: Obj, node: str, claim_name: str, error: str, *, wrapped: bool = True) -> bool:
        message = (
            podclaims.prepare_failed_message(claim_name, error)
            if wrapped
            else (f"Failed to prepare dynamic resources: {error}")
        )
        log.warning(
            "pod %s/%s on %s: %s", obj["metadata"]["namespace"], obj["metadata"]["name"], node, message
        )
        try:
            self._kube.pod_event(obj, node=node, reason="FailedPrepareDynamicResources", message=message)
        except Exception as exc:  # the event is a report; the retry matters more
            log.warning("event for pod %s: %s", obj["metadata"]["name"], describe_api_error(exc))
        return False

    def _annotate(self, obj: Obj, key: str) -> bool:
        meta = obj["metadata"]
        try:
            self._kube.annotate_pod(meta["namespace"], meta["name"], {key: "true"})
        except ApiException as exc:
            if exc.status == 404:
                return True  # gone meanwhile: its DELETED event unprepares
            log.warning("annotating pod %s/%s: %s", meta["namespace"], meta["name"], describe_api_error(exc))
            return False
        return True

    # -- unprepare ---------------------------------------------------------------------------------------

    def _unprepare(self, pod: _Pod) -> bool:
        obj = pod.obj
        meta, node = obj["metadata"], obj["spec"]["nodeName"]
        preparer = self._preparer(node)
        assert preparer is not None
        refs = self._claims_to_unprepare(pod, node, preparer)
        results = preparer.unprepare(refs) if refs else {}
        errors = [e for e in results.values() if e]
        if errors:
            log.warning(
                "pod %s/%s on %s: unprepare failed: %s", meta["namespace"], meta["name"], node, errors[0]
            )
            return False
        directory = self._containers_dir(node)
        for container in obj["spec"].get("containers") or []:
            (directory / f"{meta['namespace']}_{meta['name']}_{container['name']}.json").unlink(
                missing_ok=True
            )
        if obj.get("gone") or self._annotate(obj, stages.UNPREPARED):
            with self._mutex:
                self._pods.pop(meta["uid"], None)
            return True
        return False

    def _claims_to_unprepare(self, pod: _Pod, node: str, preparer: Preparer) -> list[ClaimRef]:
        """The pod's claims that no other live pod on `node` uses (upstream: a shared claim stays prepared
        while any pod of the node references it). Known from our prepare, else from the checkpoint."""
        names = set(podclaims.pod_claims(pod.obj).names.values()) | set(pod.prepared)
        namespace = pod.obj["metadata"]["namespace"]
        with self._mutex:
            others = [
                p.obj
                for uid, p in self._pods.items()
                if uid != pod.obj["metadata"]["uid"]
                and p.obj["spec"].get("nodeName") == node
                and p.obj["metadata"]["namespace"] == namespace
                and not p.obj.get("gone")
            ]
        in_use = {n for o in others for n in podclaims.pod_claims(o).names.values()}
        held = {ref.name: ref for ref in preparer.prepared_claims() if ref.namespace == namespace}
        return [held[n] for n in sorted(names - in_use) if n in held]


def _extended(obj: Obj) -> bool:
    return bool((obj.get("status") or {}).get("extendedResourceClaimStatus"))
