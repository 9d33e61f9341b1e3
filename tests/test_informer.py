"""The informer's loop (runtime.informer.list_and_watch): what it lists and watches from, in order, when the
server ends each watch, with and without `Source.resume`."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from fakeplugin.runtime.informer import Source, list_and_watch


class _Server:
    """Answers a list with one pod at version 1; each watch with the events queued for it (then the
    server ends the watch). Every call is recorded; `stop` is set once the script is done."""

    def __init__(self, watches: list[list[dict[str, Any]]], stop: threading.Event) -> None:
        self.watches, self.stop, self.calls = watches, stop, []

    def list(self, path: str, **_: Any) -> tuple[list[dict[str, Any]], str]:
        self.calls.append("list")
        return [_pod("a", "1")], "1"

    def watch(self, path: str, *, resource_version: str, **_: Any) -> Iterator[dict[str, Any]]:
        self.calls.append(f"watch from {resource_version}")
        if not self.watches:
            self.stop.set()
            return
        yield from self.watches.pop(0)


def _pod(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}}


def _run(source: Source, watches: list[list[dict[str, Any]]]) -> tuple[list[str], list[str]]:
    stop = threading.Event()
    server = _Server(watches, stop)
    events: list[str] = []
    list_and_watch(
        server,  # type: ignore[arg-type]
        source,
        stop=stop,
        on_list=lambda items: events.append("listed"),
        on_event=lambda kind, obj: events.append(f"{kind} {obj['metadata']['name']}"),
        synced=threading.Event(),
    )
    return server.calls, events


WATCHES = [
    [{"type": "ADDED", "object": _pod("b", "2")}, {"type": "BOOKMARK", "object": _pod("", "5")}],
    [{"type": "DELETED", "object": _pod("a", "6")}],
    [],  # nothing in a whole watch: no version to trust
]


def test_a_watch_that_ends_is_followed_by_a_fresh_list() -> None:
    calls, events = _run(Source("/api/v1/pods"), [list(w) for w in WATCHES])
    assert calls == [
        "list",
        "watch from 1",
        "list",
        "watch from 1",
        "list",
        "watch from 1",
        "list",
        "watch from 1",
    ]
    assert events == ["listed", "ADDED b", "listed", "DELETED a", "listed", "listed"]


def test_a_resumed_watch_goes_on_from_the_last_event_bookmarks_included_and_lists_after_an_empty_one() -> (
    None
):
    calls, events = _run(Source("/api/v1/pods", resume=True), [list(w) for w in WATCHES])
    assert calls == ["list", "watch from 1", "watch from 5", "watch from 6", "list", "watch from 1"]
    assert events == ["listed", "ADDED b", "DELETED a", "listed"]
