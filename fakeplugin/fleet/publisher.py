"""Keeps the ResourceSlices of every simulated node equal to what each node's plugin would publish.

One LIST and one WATCH of the driver's slices serve the whole fleet (a node plugin has one per node);
each node's pool is planned by publish.publisher.plan, the rules `fakeplugin serve` follows, so a pool's
slices, generations and splits are the same as a node plugin's. Slices of nodes outside the fleet (real
kubelet nodes, whose own plugins publish) are never touched. Writes go out on a few threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.kube import describe_api_error
from fakeplugin.publish.publisher import MAX_BACKOFF, PoolPlan, plan
from fakeplugin.releases import DriverRelease

log = logging.getLogger(__name__)

WATCH_SECONDS = 60  # the watch is renewed after this long; every renewal re-plans from a fresh list
DEBOUNCE_SECONDS = 0.2  # changes arriving together are planned together


class FleetPublisher:
    """`desired()`: node name → its desired slices, for every node of the fleet (an empty list: publish
    nothing there). `wake` is set by whoever changed what is desired."""

    def __init__(
        self,
        kube: FleetKube,
        *,
        driver: str,
        desired: Callable[[], dict[str, list[Obj]]],
        release: DriverRelease,
        writers: int = 8,
    ) -> None:
        self._kube = kube
        self._driver = driver
        self._desired = desired
        self._release = release
        self._writers = writers
        self.wake = threading.Event()
        self.synced = threading.Event()  # set after the first reconcile that wrote everything

    def sync_once(self) -> tuple[int, str]:
        """Reconcile every pool; (number of writes, resourceVersion to watch from)."""
        desired = self._desired()
        existing, version = self._kube.driver_slices(self._driver)
        by_node: dict[str, list[Obj]] = defaultdict(list)
        for s in existing:
            by_node[s["spec"].get("nodeName") or ""].append(s)
        plans = {
            node: p
            for node, want in desired.items()
            if not (p := plan(by_node.get(node, []), want, pool_name=node, release=self._release)).empty
        }
        if not plans:
            return 0, version
        started = time.monotonic()
        with ThreadPoolExecutor(self._writers, thread_name_prefix="slice-writer") as pool:
            # Per pool in order (deletes, updates, creates); pools in parallel.
            failures = [f for f in pool.map(self._apply, plans.keys(), plans.values()) if f]
        writes = sum(len(p.deletes) + len(p.updates) + len(p.creates) for p in plans.values())
        log.info(
            "published the slices of %d nodes (%d writes) in %.1f s",
            len(plans),
            writes,
            time.monotonic() - started,
        )
        if failures:
            raise RuntimeError(f"{len(failures)} pools failed, first: {failures[0]}")
        _, version = self._kube.driver_slices(self._driver)  # watch from after our own writes
        return writes, version

    def _apply(self, node: str, todo: PoolPlan) -> str:
        try:
            for obj in todo.deletes:
                self._kube.delete_slice(obj)
            for obj in todo.updates:
                self._kube.replace_slice(obj)
            for obj in todo.creates:
                self._kube.create_slice(obj)
        except Exception as exc:  # reported by the caller; the next round retries this pool
            return f"node {node}: {describe_api_error(exc)}"
        log.debug(
            "node %s: %d deleted, %d updated, %d created (generation %d)",
            node,
            len(todo.deletes),
            len(todo.updates),
            len(todo.creates),
            todo.generation,
        )
        return ""

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                _, version = self.sync_once()
                self.synced.set()
                backoff = 1.0
                self._wait_for_change(version, stop)
            except Exception as exc:  # never fatal: retried with backoff
                log.warning(
                    "publishing the fleet's slices failed: %s; retrying in %.0f s",
                    describe_api_error(exc),
                    backoff,
                )
                log.debug("fleet publish failure", exc_info=True)
                stop.wait(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    def _wait_for_change(self, version: str, stop: threading.Event) -> None:
        """Return when one of the fleet's slices changed under us, when woken, or after WATCH_SECONDS."""
        nodes = set(self._desired())
        deadline = time.monotonic() + WATCH_SECONDS
        while not stop.is_set() and time.monotonic() < deadline:
            if self.wake.is_set():
                self.wake.clear()
                stop.wait(DEBOUNCE_SECONDS)
                return
            for event in self._kube.watch_driver_slices(
                self._driver, resource_version=version, timeout_seconds=2
            ):
                if event["type"] == "BOOKMARK":
                    version = event["object"]["metadata"]["resourceVersion"]
                    continue
                version = event["object"]["metadata"].get("resourceVersion", version)
                if event["object"].get("spec", {}).get("nodeName") in nodes:
                    log.info(
                        "ResourceSlice %s %s by someone else: reconciling",
                        event["object"]["metadata"]["name"],
                        event["type"].lower(),
                    )
                    stop.wait(DEBOUNCE_SECONDS)
                    return
                if self.wake.is_set():
                    break
