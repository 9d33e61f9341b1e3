"""The API calls a fleet makes beyond a node plugin's (fakeplugin.kube.Kube): every node, every pod, all
of the driver's slices, pod annotations and events. Plain dicts in API shape, like Kube."""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from fakeplugin.kube import SLICES, Kube, describe_api_error

log = logging.getLogger(__name__)

Obj = dict[str, Any]
# Lists of metadata only (names, labels, ...): a fraction of the full objects (apimachinery's
# PartialObjectMetadataList, as `kubectl get -o name` asks).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"


class FleetKube(Kube):
    def list(self, path: str, *, field_selector: str = "") -> tuple[list[Obj], str]:
        """Every object at `path` (a collection), and the list's resourceVersion to watch from. Paged
        (500 a page), so a 4000-pod list never makes the API server build one huge answer."""
        items: list[Obj] = []
        query = [("limit", "500")] + ([("fieldSelector", field_selector)] if field_selector else [])
        token = ""
        while True:
            page = self._json("GET", path, query=query + ([("continue", token)] if token else []))
            items.extend(page.get("items") or [])
            token = page["metadata"].get("continue") or ""
            if not token:
                return items, page["metadata"]["resourceVersion"]

    def count(self, path: str, *, field_selector: str = "") -> int:
        """How many objects `path` holds. Without a selector: one item and the server's
        remainingItemCount; with one (the server then gives no count): their metadata only, paged."""
        if not field_selector:
            page = self._json("GET", path, query=[("limit", "1")])
            return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)
        total, token = 0, ""
        while True:
            query = [("limit", "1000"), ("fieldSelector", field_selector)] + (
                [("continue", token)] if token else []
            )
            page = self._json("GET", path, query=query, accept=METADATA_ONLY)
            total += len(page.get("items") or [])
            token = page["metadata"].get("continue") or ""
            if not token:
                return total

    def watch(
        self, path: str, *, resource_version: str, timeout_seconds: int, field_selector: str = ""
    ) -> Iterator[Obj]:
        """Watch events (type, object) at `path` until the server ends the watch; ERROR raises."""
        query = [("allowWatchBookmarks", "true")] + (
            [("fieldSelector", field_selector)] if field_selector else []
        )
        yield from self._watch(path, query, resource_version, timeout_seconds)

    def driver_slices(self, driver: str) -> tuple[list[Obj], str]:
        return self.list(SLICES, field_selector=f"spec.driver={driver}")

    def watch_driver_slices(
        self, driver: str, *, resource_version: str, timeout_seconds: int
    ) -> Iterator[Obj]:
        return self.watch(
            SLICES,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            field_selector=f"spec.driver={driver}",
        )

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> Obj:
        return self.annotate(
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}", annotations
        )

    def pod_event(self, pod: Obj, *, node: str, reason: str, message: str, warning: bool = True) -> Obj:
        """An Event on `pod` as the node's kubelet reports it (source: kubelet, host: the node)."""
        meta = pod["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet",
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self._json("POST", f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/events", body=body)


def list_and_watch(
    kube: FleetKube,
    path: str,
    *,
    stop: threading.Event,
    on_list: Callable[[list[Obj]], None],
    on_event: Callable[[str, Obj], None],
    synced: threading.Event,
    watch_seconds: int = 300,
    max_backoff: float = 30.0,
) -> None:
    """An informer's loop until `stop`: list (then `on_list(items)`, `synced` set), watch from the list's
    version (`on_event(type, object)` for ADDED, MODIFIED, DELETED), list again when the watch ends. Any
    failure is logged and retried with backoff, never fatal."""
    backoff = 1.0
    while not stop.is_set():
        try:
            items, version = kube.list(path)
            on_list(items)
            synced.set()
            backoff = 1.0
            for event in kube.watch(path, resource_version=version, timeout_seconds=watch_seconds):
                if stop.is_set():
                    return
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event["type"], event["object"])
        except Exception as exc:
            log.warning("watching %s failed: %s; retrying in %.0f s", path, describe_api_error(exc), backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, max_backoff)
