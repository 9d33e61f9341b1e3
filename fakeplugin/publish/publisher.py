"""Keeps this node's ResourceSlices on the API server equal to the desired ones.

The pure part, plan(), follows the upstream resourceslice controller's rules (wire-protocol.md §7.2) of
the release's k8s libraries (fakeplugin.releases): 25.12 (libs 0.34) matches desired and existing slices
when their device-name sets are equal (one existing + one desired always match: update in place); 0.4.1
(libs 0.36) matches slice i with the existing slice whose name starts with i in as many hex digits as its
generateName has, so any other name (e.g. one a 25.12 plugin created) is obsolete: deleted and re-created
under the new name. pool.generation starts at 1, is kept when no slice is added or
removed and at most one changes, and is bumped otherwise; obsolete and duplicate slices are deleted
first, then updates, then creates. The Publisher runs plan() in a loop with a watch, so a slice
deleted by someone (the kubelet wipes slices at start) is re-created, and an unreachable API server
is retried with backoff, never fatal.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fakeplugin import releases
from fakeplugin.kube import Kube, describe_api_error
from fakeplugin.releases import DriverRelease

log = logging.getLogger(__name__)

Obj = dict[str, Any]

MAX_BACKOFF = 60.0
WATCH_TIMEOUT = 30  # seconds; after each watch the pool is reconciled again, so drift heals by itself


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


def _content(slice_obj: Obj, *, with_generation: bool) -> str:
    spec = copy.deepcopy(slice_obj.get("spec", {}))
    if not with_generation:
        spec.get("pool", {}).pop("generation", None)
    return _canon({"spec": spec, "owners": slice_obj.get("metadata", {}).get("ownerReferences")})


def plan(
    existing: list[Obj], desired: list[Obj], *, pool_name: str, release: DriverRelease | None = None
) -> PoolPlan:
    """Writes that turn `existing` (this driver's slices on this node) into `desired` (one pool), matched
    as the resourceslice controller of `release` (default: the default release) matches them."""
    deletes = [s for s in existing if s["spec"].get("pool", {}).get("name") != pool_name]
    pool = sorted(
        (s for s in existing if s["spec"].get("pool", {}).get("name") == pool_name),
        key=lambda s: s["metadata"].get("creationTimestamp") or "",
    )
    current = max((int(s["spec"]["pool"].get("generation", 0)) for s in pool), default=0)

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

    changed = sum(
        1
        for have, want in pairs
        if _content(have, with_generation=False) != _content(want, with_generation=False)
    )
    pool_deletes = len(deletes) - sum(1 for s in existing if s not in pool)
    if current == 0:
        generation = 1
    elif not creates and not pool_deletes and changed <= 1:
        generation = current
    else:
        generation = current + 1

    result = PoolPlan(generation=generation, deletes=deletes)
    for have, want in pairs:
        body = _with_generation(want, generation)
        if _content(have, with_generation=True) != _content(body, with_generation=True):
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


class Publisher:
    """Runs plan() against the API server until stopped; every failure is logged and retried."""

    def __init__(
        self,
        kube: Kube,
        *,
        driver: str,
        node_name: str,
        desired: Callable[[], list[Obj]],
        release: DriverRelease | None = None,
    ) -> None:
        self._kube = kube
        self._driver = driver
        self._node = node_name
        self._desired = desired
        self._release = release
        self.synced = threading.Event()  # set after the first successful reconcile
        self.wake = threading.Event()  # set by whoever changed the desired state (e.g. a config reload)

    def sync_once(self) -> str:
        """Reconcile once; returns the resourceVersion to watch from."""
        desired = self._desired()
        existing, listed_version = self._kube.list_slices(driver=self._driver, node_name=self._node)
        todo = plan(existing, desired, pool_name=self._node, release=self._release)
        if todo.empty:
            return listed_version
        for obj in todo.deletes:
            self._kube.delete_slice(obj)
            log.info("deleted ResourceSlice %s", obj["metadata"]["name"])
        for obj in todo.updates:
            self._kube.replace_slice(obj)
            log.info(
                "updated ResourceSlice %s (pool generation %d)", obj["metadata"]["name"], todo.generation
            )
        for obj in todo.creates:
            created = self._kube.create_slice(obj)
            log.info(
                "created ResourceSlice %s with %d devices (pool %s, generation %d)",
                created["metadata"]["name"],
                len(obj["spec"].get("devices") or []),
                self._node,
                todo.generation,
            )
        # Watch from after our own writes, so they do not wake the loop again.
        _, resource_version = self._kube.list_slices(driver=self._driver, node_name=self._node)
        return resource_version

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                resource_version = self.sync_once()
                self.synced.set()
                backoff = 1.0
                self._wait_for_change(resource_version, stop)
            except Exception as exc:  # never fatal: the kubelet keeps working with what is published
                log.warning(
                    "publishing ResourceSlices of node %s failed: %s; retrying in %.0f s",
                    self._node,
                    describe_api_error(exc),
                    backoff,
                )
                log.debug("publish failure", exc_info=True)
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _wait_for_change(self, resource_version: str, stop: threading.Event) -> None:
        """Return when a slice of ours changed (e.g. the kubelet wiped it), or after WATCH_TIMEOUT."""
        deadline = time.monotonic() + WATCH_TIMEOUT
        while not stop.is_set() and time.monotonic() < deadline:
            if self.wake.is_set():
                self.wake.clear()
                return
            for event in self._kube.watch_slices(
                driver=self._driver,
                node_name=self._node,
                resource_version=resource_version,
                timeout_seconds=5,
            ):
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    log.debug(
                        "ResourceSlice %s %s", event["object"]["metadata"]["name"], event["type"].lower()
                    )
                    return
                if event["type"] == "ERROR":  # e.g. 410 Gone: resync from a fresh list
                    return
