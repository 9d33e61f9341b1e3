"""Keeps the ResourceSlices of the nodes a host serves on the API server equal to the desired ones.

The pure part, plan(), follows the upstream resourceslice controller's rules
(kubernetes/dynamic-resource-allocation resourceslice/resourceslicecontroller.go at v0.34.0 and v0.36.0) of
the release's k8s libraries (fakeplugin.releases): 25.12 (libs 0.34) matches desired and existing slices
when their device-name sets are equal (one existing + one desired always match: update in place); 0.4.1
(libs 0.36) matches slice i with the existing slice whose name starts with i in as many hex digits as its
generateName has, so any other name (e.g. one a 25.12 plugin created) is obsolete: deleted and re-created
under the new name. pool.generation starts at 1, is kept when no slice is added or
removed and at most one changes, and is bumped otherwise; obsolete and duplicate slices are deleted
first, then updates, then creates. The SlicePublisher runs plan() for one pool (`serve`) or many
(`fleet`) in a loop with a watch, so a slice deleted by someone (the kubelet wipes slices at start) is
re-created, and an unreachable API server is retried with backoff (runtime.retry), never fatal.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fakeplugin import releases
from fakeplugin.kube import SLICES, Kube, describe_api_error
from fakeplugin.releases import DriverRelease
from fakeplugin.runtime import retry

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEBOUNCE_SECONDS = 0.2  # changes arriving together are planned together
LIST_PAGE = 100  # slices per page of a resync's list: a page's decoded devices are one peak of the resync


@dataclass
class PoolPlan:
    generation: int
    deletes: list[Obj] = field(default_factory=list)  # existing objects (with uid + resourceVersion)
    updates: list[Obj] = field(default_factory=list)  # full bodies keeping the existing metadata
    creates: list[Obj] = field(default_factory=list)  # bodies with metadata.generateName

    @property
    def empty(self) -> bool:
        return not (self.deletes or self.updates or self.creates)


def _device_names(slice_obj: Obj) -> frozenset[str]:
    return frozenset(d["name"] for d in slice_obj.get("spec", {}).get("devices") or [])


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _content(slice_obj: Obj) -> str:
    """A digest of what a slice publishes, but for its pool's generation: equal for slices that need no
    write but maybe a new generation. (No copy of the devices: at 5000 nodes, deep copies were most of a
    resync.)"""
    spec = dict(slice_obj.get("spec", {}))
    spec["pool"] = {k: v for k, v in (spec.get("pool") or {}).items() if k != "generation"}
    text = _canon({"spec": spec, "owners": slice_obj.get("metadata", {}).get("ownerReferences")})
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def brief(slice_obj: Obj, contents: dict[str, str]) -> Obj:
    """An existing slice as plan() needs it, its devices by name only; its content digest goes into
    `contents` under its name. A resync holds every slice of the driver at once: this way a few hundred
    bytes each instead of all their devices (issue 32: each resync's peak pinned 4-5 MiB of arenas)."""
    contents[slice_obj["metadata"]["name"]] = _content(slice_obj)
    spec = slice_obj.get("spec", {})
    return {
        **slice_obj,
        "spec": {**spec, "devices": [{"name": d["name"]} for d in spec.get("devices") or []]},
    }


def _generation(slice_obj: Obj) -> int:
    return int(slice_obj["spec"].get("pool", {}).get("generation", 0))


def plan(
    existing: list[Obj],
    desired: list[Obj],
    *,
    pool_name: str,
    release: DriverRelease | None = None,
    contents: Mapping[str, str] | None = None,
) -> PoolPlan:
    """Writes that turn `existing` (this driver's slices on this node) into `desired` (one pool), matched
    as the resourceslice controller of `release` (default: the default release) matches them.
    `contents`: existing slices' content digests by name, for those given as brief() made them."""
    deletes = [s for s in existing if s["spec"].get("pool", {}).get("name") != pool_name]
    pool = sorted(
        (s for s in existing if s["spec"].get("pool", {}).get("name") == pool_name),
        key=lambda s: s["metadata"].get("creationTimestamp") or "",
    )
    current = max((_generation(s) for s in pool), default=0)

    pairs: list[tuple[Obj, Obj]] = []
    creates: list[Obj] = []
    if (release or releases.get(None)).slice_index_prefix:
        pairs, creates, unmatched = _match_by_index(pool, desired)
        deletes.extend(unmatched)
    elif len(pool) == 1 and len(desired) == 1:
        pairs.append((pool[0], desired[0]))
    else:
        unmatched = list(pool)
        for want in desired:
            names = _device_names(want)
            match = next((s for s in unmatched if _device_names(s) == names), None)
            if match is None:
                creates.append(want)
            else:
                unmatched.remove(match)
                pairs.append((match, want))
        # Invariant: a restart never leaves duplicates — whatever did not match is deleted.
        deletes.extend(unmatched)

    known = contents or {}
    same = [
        (known.get(have["metadata"].get("name", "")) or _content(have)) == _content(want)
        for have, want in pairs
    ]
    changed = same.count(False)
    pool_deletes = len(deletes) - sum(1 for s in existing if s not in pool)
    if current == 0:
        generation = 1
    elif not creates and not pool_deletes and changed <= 1:
        generation = current
    else:
        generation = current + 1

    result = PoolPlan(generation=generation, deletes=deletes)
    for (have, want), unchanged in zip(pairs, same, strict=True):
        if unchanged and _generation(have) == generation:
            continue
        body = _with_generation(want, generation)
        merged = copy.deepcopy(have)
        merged["spec"] = body["spec"]
        merged["metadata"]["ownerReferences"] = body["metadata"].get("ownerReferences")
        result.updates.append(merged)
    result.creates = [_with_generation(want, generation) for want in creates]
    return result


def _match_by_index(
    pool: list[Obj], desired: list[Obj]
) -> tuple[list[tuple[Obj, Obj]], list[Obj], list[Obj]]:
    """(pairs, creates, obsolete): existing slice named `<i in hex>-...` (the prefix as long as desired
    generateNames have it) is desired slice i's; the first one wins, the rest are obsolete."""
    digits = len(desired[0]["metadata"]["generateName"].partition("-")[0]) if desired else 0
    matched: dict[int, Obj] = {}
    obsolete: list[Obj] = []
    for have in pool:
        prefix, sep, _ = have["metadata"].get("name", "").partition("-")
        index = int(prefix, 16) if sep and len(prefix) == digits and _is_hex(prefix) else -1
        if 0 <= index < len(desired) and index not in matched:
            matched[index] = have
        else:
            obsolete.append(have)
    pairs = [(matched[i], want) for i, want in enumerate(desired) if i in matched]
    creates = [want for i, want in enumerate(desired) if i not in matched]
    return pairs, creates, obsolete


def _is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def _with_generation(slice_obj: Obj, generation: int) -> Obj:
    body = copy.deepcopy(slice_obj)
    body["spec"]["pool"]["generation"] = generation
    return body


class SlicePublisher:
    """Keeps the pools of the nodes `pools()` names equal to `desired(node, server_version)` (its slices;
    an empty list publishes nothing there, None: not ours now) on the API server, until stopped; every
    failure is logged and retried.

    One list and one watch of the driver's slices serve every pool (`node`: only that node's, as a
    kubelet plugin's RBAC and field selector have it); slices of nodes not in `desired` (e.g. real
    kubelet nodes, whose own plugins publish) are never touched. Writes go out on `writers` threads,
    per pool in order (deletes, updates, creates), pools in parallel. The API server's version is asked
    once, on the first sync (the DynamicMIG layout follows it). `wake` is set by whoever changed what is
    desired; `resync_seconds`: every pool is re-planned from a fresh list at least this often, so drift
    heals by itself.
    """

    def __init__(
        self,
        kube: Kube,
        *,
        driver: str,
        pools: Callable[[], list[str]],
        desired: Callable[[str, tuple[int, int]], list[Obj] | None],
        release: DriverRelease,
        node: str = "",
        writers: int = 1,
        resync_seconds: float = 30.0,
        wake: threading.Event,
    ) -> None:
        self._kube = kube
        self._driver = driver
        self._pools_wanted = pools
        self._desired = desired
        self._release = release
        self._selector = f"spec.driver={driver}" + (f",spec.nodeName={node}" if node else "")
        self._writers = writers
        self._resync = resync_seconds
        self._server_version: tuple[int, int] | None = None
        self._pools: frozenset[str] = frozenset()  # the nodes of the last sync: their slices are ours
        self._pool_log = logging.INFO if node else logging.DEBUG  # a fleet logs a summary at info
        self.wake = wake

    def run(self, stop: threading.Event) -> None:
        def cycle() -> None:
            self._wait_for_change(self.sync_once(), stop)

        retry.forever(cycle, stop=stop, what=f"publishing the ResourceSlices of {self._selector}")

    def sync_once(self) -> str:
        """Reconcile every pool once; returns the resourceVersion to watch from."""
        if self._server_version is None:
            self._server_version = self._kube.server_version()
            log.info("API server %d.%d: slices laid out for it", *self._server_version)
        contents: dict[str, str] = {}
        existing, version = self._kube.list(
            SLICES, field_selector=self._selector, each=lambda s: brief(s, contents), limit=LIST_PAGE
        )
        by_node: dict[str, list[Obj]] = defaultdict(list)
        for s in existing:
            by_node[s["spec"].get("nodeName") or ""].append(s)
        # Node by node: one node's desired slices in memory at a time, kept only where they need writes.
        pools: list[str] = []
        plans: dict[str, PoolPlan] = {}
        for node in self._pools_wanted():
            want = self._desired(node, self._server_version)
            if want is None:
                continue
            pools.append(node)
            todo = plan(by_node.get(node, []), want, pool_name=node, release=self._release, contents=contents)
            if not todo.empty:
                plans[node] = todo
        self._pools = frozenset(pools)
        if not plans:
            return version
        started = time.monotonic()
        with ThreadPoolExecutor(min(self._writers, len(plans)), thread_name_prefix="slice-writer") as pool:
            failures = [f for f in pool.map(self._apply, plans.keys(), plans.values()) if f]
        if self._pool_log != logging.INFO:
            log.info(
                "published the slices of %d nodes (%d writes) in %.1f s",
                len(plans),
                sum(len(p.deletes) + len(p.updates) + len(p.creates) for p in plans.values()),
                time.monotonic() - started,
            )
        if failures:
            raise RuntimeError(f"{len(failures)} pools failed, first: {failures[0]}")
        return self._kube.resource_version(SLICES, field_selector=self._selector)  # after our own writes

    def _apply(self, node: str, todo: PoolPlan) -> str:
        """One pool's writes; the failure's text, "" when none (the next round retries the pool)."""
        try:
            for obj in todo.deletes:
                self._kube.delete_slice(obj)
                log.log(self._pool_log, "deleted ResourceSlice %s", obj["metadata"]["name"])
            for obj in todo.updates:
                self._kube.replace_slice(obj)
                log.log(
                    self._pool_log,
                    "updated ResourceSlice %s (pool generation %d)",
                    obj["metadata"]["name"],
                    todo.generation,
                )
            for obj in todo.creates:
                created = self._kube.create_slice(obj)
                log.log(
                    self._pool_log,
                    "created ResourceSlice %s with %d devices (pool %s, generation %d)",
                    created["metadata"]["name"],
                    len(obj["spec"].get("devices") or []),
                    node,
                    todo.generation,
                )
        except Exception as exc:
            return f"node {node}: {describe_api_error(exc)}"
        return ""

    def _wait_for_change(self, version: str, stop: threading.Event) -> None:
        """Return when woken, when a slice of a pool we publish changed under us (e.g. the kubelet wiped
        it), or after `resync_seconds`. Changes arriving together are planned together."""
        nodes = self._pools
        deadline = time.monotonic() + self._resync
        while not stop.is_set() and time.monotonic() < deadline:
            if self.wake.is_set():
                self.wake.clear()
                stop.wait(DEBOUNCE_SECONDS)
                return
            for event in self._kube.watch(
                SLICES, resource_version=version, timeout_seconds=2, field_selector=self._selector
            ):
                version = event["object"]["metadata"].get("resourceVersion", version)
                if event["type"] != "BOOKMARK" and event["object"].get("spec", {}).get("nodeName") in nodes:
                    log.info(
                        "ResourceSlice %s %s by someone else: reconciling",
                        event["object"]["metadata"]["name"],
                        event["type"].lower(),
                    )
                    stop.wait(DEBOUNCE_SECONDS)
                    return
                if self.wake.is_set():
                    break
