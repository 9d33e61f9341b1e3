"""The skeleton every driver's prepare side shares on one node (runtime.driver.Preparing).

Opened once, on first use or by the host at start; then each claim's request is made in the caller's
thread (outside the lock), and every request queued by any caller meanwhile is done in one batch
(runtime.groupcommit) under the node lock (runtime.nodelock), where the driver reads its checkpoint once
and writes it once per step. Unprepare likewise. A driver's Preparer subclasses `NodePreparer` and says
only what is its own: its start (`_startup`), a claim's request (`_request`), one batch with the lock held
(`_prepare_locked`, `_unprepare_locked`), the answers when the lock cannot be had, its checkpoint's
claims.

Invariant: each batch sees a claim once (the first of its requests: concurrent calls for one claim share
its result), and no batch runs before `_startup` has completed.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.runtime.driver import Claim
from fakeplugin.runtime.groupcommit import GroupCommit
from fakeplugin.runtime.nodelock import FILE_NAME as LOCK_FILE
from fakeplugin.runtime.nodelock import LockTimeoutError, NodeLock


class PrepareRequest(Protocol):
    """A claim to prepare, as a driver resolved it for the batch."""

    @property
    def ref(self) -> ClaimRef: ...


class Named(Protocol):
    """A checkpoint entry: the claim's namespace and name (the checkpoint is keyed by UID)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=PrepareRequest)
T = TypeVar("T")  # a batch's item: a request or a reference
V = TypeVar("V")  # its result: PrepareResult, or an unprepare's error


class NodePreparer(ABC, Generic[R]):
    """Prepares and unprepares claims on one node; safe across threads (and, by the node lock's flock,
    across processes). Making one does no I/O."""

    def __init__(self, plugin_dir: Path, *, lock_timeout: float) -> None:
        self._lock = NodeLock(plugin_dir / LOCK_FILE, timeout=lock_timeout)
        self._opening = threading.Lock()
        self._opened = False
        self._prepares = GroupCommit(self._prepare_batch)
        self._unprepares = GroupCommit(self._unprepare_batch)

    @property
    def opened(self) -> bool:
        return self._opened

    def open(self) -> None:
        """The start (`_startup`), once; a failure is raised again by the next call, which tries again."""
        if self._opened:
            return
        with self._opening:
            if not self._opened:
                self._startup()
                self._opened = True

    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        """One result per claim UID: a claim's request made in this thread, then the batch."""
        self.open()
        results: dict[str, PrepareResult] = {}
        requests: list[R] = []
        for claim in claims:
            request = self._request(claim)
            if isinstance(request, PrepareResult):
                results[claim.ref.uid] = request
            else:
                requests.append(request)
        if requests:
            batch = self._prepares.submit(requests)
            results |= {r.ref.uid: batch[r.ref.uid] for r in requests}
        return results

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.open()
        return self._unprepares.submit(list(claims)) if claims else {}

    def prepared_claims(self) -> list[ClaimRef]:
        """The claims the checkpoint holds, in any state: what Unprepare would undo."""
        self.open()
        return [ClaimRef(e.namespace, uid, e.name) for uid, e in self._checkpoint_claims().items()]

    def close(self) -> None:
        """Nothing a running prepare side keeps: its files outlive it, as the real drivers'."""

    # -- what a driver says -----------------------------------------------------------------------------

    @abstractmethod
    def _startup(self) -> None:
        """The start-up work: directories, stale files, the checkpoint of this boot (taking the lock)."""

    @abstractmethod
    def _request(self, claim: Claim) -> R | PrepareResult:
        """The claim's request for the batch, or its answer now (failed, or nothing of ours here)."""

    @abstractmethod
    def _prepare_locked(self, requests: list[R]) -> dict[str, PrepareResult]: ...

    @abstractmethod
    def _unprepare_locked(self, refs: list[ClaimRef]) -> dict[str, str]: ...

    @abstractmethod
    def _prepare_unlocked(self, ref: ClaimRef, message: str) -> PrepareResult:
        """The answer of a claim whose batch could not take the lock (`message` says why)."""

    @abstractmethod
    def _unprepare_unlocked(self, ref: ClaimRef, message: str) -> str: ...

    @abstractmethod
    def _checkpoint_claims(self) -> Mapping[str, Named]:
        """Claim UID → its checkpoint entry, the checkpoint as it is now."""

    # -- one batch ------------------------------------------------------------------------------------------

    def _prepare_batch(self, requests: list[R]) -> dict[str, PrepareResult]:
        return self._under_lock(
            _unique(requests, lambda r: r.ref.uid),
            self._prepare_locked,
            lambda r, message: (r.ref.uid, self._prepare_unlocked(r.ref, message)),
        )

    def _unprepare_batch(self, refs: list[ClaimRef]) -> dict[str, str]:
        return self._under_lock(
            _unique(refs, lambda ref: ref.uid),
            self._unprepare_locked,
            lambda ref, message: (ref.uid, self._unprepare_unlocked(ref, message)),
        )

    def _under_lock(
        self,
        items: list[T],
        run: Callable[[list[T]], dict[str, V]],
        unlocked: Callable[[T, str], tuple[str, V]],
    ) -> dict[str, V]:
        try:
            with self._lock:
                return run(items)
        except LockTimeoutError as e:
            return dict(unlocked(item, f"error acquiring prep/unprep lock: {e}") for item in items)


def _unique(items: list[T], key: Callable[[T], str]) -> list[T]:
    """The first of each claim."""
    seen: dict[str, T] = {}
    for item in items:
        seen.setdefault(key(item), item)
    return list(seen.values())
