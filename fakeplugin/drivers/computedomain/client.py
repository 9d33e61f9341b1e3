"""The ComputeDomain driver's own API client (domains.DomainApi) over the REST client (fakeplugin.kube.Kube):
its ComputeDomain lookups by UID from one informer, its clique reads, its node's labels.

Upstream's ComputeDomainManager (`cmd/compute-domain-kubelet-plugin/computedomain.go`) finds a ComputeDomain
by UID in an informer over every namespace, indexed by UID. `DomainCache` is that informer
(runtime.informer: list, then watch), one per driver, so one per process: a fleet's thousands of nodes share
it, and a channel Prepare no longer lists every ComputeDomain.

- not synced (before the first list, or once stopped): a lookup lists, as before the cache;
- synced, the UID not in it: one list too (a ComputeDomain created just before the claim's Prepare may not
  have reached the watch yet), and only None when the API server has none either: a miss is re-checked,
  never an error on its own;
- the informer starts with the first node plugin's start (`ComputeDomainNode.open`) and stops at the
  first `close` (the host stops: runtime.driver.Preparing.close).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.kube import NODES, Kube
from fakeplugin.runtime.informer import Source, list_and_watch

Obj = dict[str, Any]


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class DomainCache:
    """Every ComputeDomain of the cluster by UID, from one list + watch of `kube`, once `start`ed."""

    def __init__(self, kube: Kube) -> None:
        self._kube = kube
        self._source = Source(cd_api.compute_domains_path(), resume=True)
        self._domains: dict[str, Obj] = {}
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None  # set while running
        self.synced = threading.Event()

    def start(self) -> None:
        """Start the informer (a daemon thread) unless it runs; idempotent."""
        with self._lock:
            if self._stop is not None:
                return
            stop = self._stop = threading.Event()
            synced = self.synced = threading.Event()

        def listed(items: list[Obj]) -> None:
            domains = {_uid(cd): cd for cd in items}
            with self._lock:
                if not stop.is_set():  # a stopped informer's late answer changes nothing
                    self._domains = domains

        def event(kind: str, obj: Obj) -> None:
            with self._lock:
                if stop.is_set():
                    return
                if kind == "DELETED":
                    self._domains.pop(_uid(obj), None)
                else:
                    self._domains[_uid(obj)] = obj

        threading.Thread(
            target=list_and_watch,
            args=(self._kube, self._source),
            kwargs={"stop": stop, "on_list": listed, "on_event": event, "synced": synced},
            name="computedomains",
            daemon=True,
        ).start()

    def stop(self) -> None:
        """Stop the informer; lookups list again. Idempotent."""
        with self._lock:
            stop, self._stop = self._stop, None
            if stop is not None:
                stop.set()
            self.synced = threading.Event()
            self._domains = {}

    def get(self, uid: str) -> Obj | None:
        """The ComputeDomain with this UID in any namespace; None when the API server has none."""
        with self._lock:
            found = self._domains.get(uid) if self.synced.is_set() else None
        if found is not None:
            return found
        items, _ = self._kube.list(self._source.path)  # not synced, or not (yet) seen: ask the API server
        return next((cd for cd in items if _uid(cd) == uid), None)


class DomainClient:
    """domains.DomainApi over `kube` (its generic calls) and a DomainCache; also the generic calls the
    emulated daemons make through the driver's client (emulateddaemon.py: get, create, replace, patch).
    Making one asks nothing of `kube`."""

    def __init__(self, kube: Kube) -> None:
        self.domains = DomainCache(kube)
        self._kube = kube

    def get(self, path: str) -> Obj:
        return self._kube.get(path)

    def create(self, path: str, body: Obj) -> Obj:
        return self._kube.create(path, body)

    def replace(self, path: str, body: Obj) -> Obj:
        return self._kube.replace(path, body)

    def patch(self, path: str, body: Obj) -> Obj:
        return self._kube.patch(path, body)

    def start(self) -> None:
        self.domains.start()

    def stop(self) -> None:
        self.domains.stop()

    def compute_domain(self, uid: str) -> Obj | None:
        return self.domains.get(uid)

    def compute_domain_clique(self, namespace: str, name: str) -> Obj:
        return self.get(cd_api.clique_path(namespace, name))

    def get_node(self, name: str) -> Obj:
        return self.get(f"{NODES}/{_segment(name)}")

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None], *, resource_version: str) -> Obj:
        """Merge-patch the node's labels (None removes one); the resourceVersion makes it conditional."""
        meta: Obj = {"labels": dict(labels)}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return self.patch(f"{NODES}/{_segment(name)}", {"metadata": meta})


def _segment(value: str) -> str:
    return quote(value, safe="")
