"""Group commit: work submitted by many threads at once is done in batches, one batch at a time.

The kubelet calls NodePrepareResources concurrently (one call per pod being started); every claim's state
must reach the checkpoint before its CDI spec is written (PrepareStarted) and after (PrepareCompleted).
Done one claim at a time, that is two checkpoint writes per claim while the others queue. Here the claims
that queued while a batch ran are committed together by the next one: the same states in the same order,
two writes per batch.

Leader/follower: the first submitter runs a batch of everything queued; followers wait; when a batch is
done its leader hands the lead to the oldest waiter still queued, so no caller serves others forever.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Waiter(Generic[Item, Result]):
    def __init__(self, items: Sequence[Item]) -> None:
        self.items = items
        self.event = threading.Event()  # set once: promoted to lead, or finished
        self.promoted = False
        self.finished = False
        self.results: dict[str, Result] = {}
        self.error: BaseException | None = None


class GroupCommit(Generic[Item, Result]):
    """`submit(items)` returns what `commit(batch)` returned for the batch its items were part of.

    `commit` gets the items of every submitter of the batch, in submission order, and returns results
    keyed by item ID (claim UID); it runs in one submitter's thread, never two at once.
    """

    def __init__(self, commit: Callable[[list[Item]], dict[str, Result]]) -> None:
        self._commit = commit
        self._mutex = threading.Lock()
        self._queue: list[_Waiter[Item, Result]] = []
        self._busy = False  # a batch is running or a promoted waiter is about to run one

    def submit(self, items: Sequence[Item]) -> dict[str, Result]:
        waiter: _Waiter[Item, Result] = _Waiter(items)
        with self._mutex:
            self._queue.append(waiter)
            if not self._busy:
                self._busy = waiter.promoted = True
        if not waiter.promoted:
            waiter.event.wait()
        if not waiter.finished:  # promoted: this thread runs the next batch, which includes its items
            self._run_batch()
        if waiter.error is not None:
            raise waiter.error
        return waiter.results

    def _run_batch(self) -> None:
        with self._mutex:
            batch, self._queue = self._queue, []
        results: dict[str, Result] = {}
        error: BaseException | None = None
        try:
            results = self._commit([item for waiter in batch for item in waiter.items])
        except BaseException as e:  # handed to every submitter of the batch, raised in its own thread
            error = e
        for waiter in batch:
            waiter.results, waiter.error, waiter.finished = results, error, True
            waiter.event.set()
        with self._mutex:
            if self._queue:
                successor = self._queue[0]
                successor.promoted = True
                successor.event.set()
            else:
                self._busy = False
