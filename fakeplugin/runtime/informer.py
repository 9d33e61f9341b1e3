"""An informer's loop (list, then watch from the list's resourceVersion, list again when the watch ends),
for a collection or for one named object.

One object (`Source.name`) is read with GET and watched with a field selector on its name: a kubelet
plugin's RBAC allows `get` and `watch` on its Node, not `list`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from fakeplugin.kube import Kube, Obj
from fakeplugin.runtime import retry

# The API server ends each watch after this long; a fresh list follows (with Source.resume: a watch).
WATCH_SECONDS = 300


@dataclass(frozen=True)
class Source:
    path: str  # a collection, e.g. /api/v1/nodes
    name: str = ""  # only this object of it
    field_selector: str = ""
    label_selector: str = ""
    # A watch event whose raw line this refuses is skipped undecoded (Kube.watch); the list is not filtered.
    keep: Callable[[str], bool] | None = None
    # When the server ends a watch, watch again from the last event's resourceVersion (bookmarks count),
    # as client-go's reflector does, instead of listing again: a fresh list of thousands of pods every
    # WATCH_SECONDS was the fleet's largest heap peak (issue 32). A failure (410 Gone: too old) lists.
    resume: bool = False

    def list(self, kube: Kube) -> tuple[list[Obj], str]:
        if self.name:
            obj = kube.get(f"{self.path}/{self.name}")
            return [obj], obj["metadata"]["resourceVersion"]
        return kube.list(self.path, field_selector=self.field_selector, label_selector=self.label_selector)

    @property
    def watch_selector(self) -> str:
        return f"metadata.name={self.name}" if self.name else self.field_selector


def list_and_watch(
    kube: Kube,
    source: Source,
    *,
    stop: threading.Event,
    on_list: Callable[[list[Obj]], None],
    on_event: Callable[[str, Obj], None],
    synced: threading.Event,
) -> None:
    """Until `stop`: list (then `on_list(items)`, `synced` set), watch from the list's version
    (`on_event(type, object)` for ADDED, MODIFIED, DELETED), list again when the watch ends (or, with
    `source.resume`, watch again from the last event seen, listing only when a watch brought no event);
    any failure is retried (runtime.retry), with a fresh list."""

    def cycle() -> None:
        items, version = source.list(kube)
        on_list(items)
        del items  # not held for the watch's minutes: a list of thousands of pods is megabytes
        synced.set()
        while True:
            seen = ""
            for event in kube.watch(
                source.path,
                resource_version=version,
                timeout_seconds=WATCH_SECONDS,
                field_selector=source.watch_selector,
                label_selector=source.label_selector,
                keep=source.keep,
            ):
                if stop.is_set():
                    return
                seen = (event.get("object") or {}).get("metadata", {}).get("resourceVersion") or seen
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    on_event(event["type"], event["object"])
            if not (source.resume and seen):
                return  # listed again
            version = seen

    retry.forever(cycle, stop=stop, what=f"watching {source.path}/{source.name}".rstrip("/"))
