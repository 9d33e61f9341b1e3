"""The node-wide prep/unprep lock: every read-modify-write of the checkpoint sees the previous one's result.

A threading lock (threads of this process) plus an flock on `<plugin_dir>/pu.lock` (other processes: the old
and the new plugin during a rolling update), as the real driver's `pu.lock`. Waiting is bounded: a timeout
raises LockTimeoutError, which fails the claims waiting on it with the real driver's text.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path
from types import TracebackType

FILE_NAME = "pu.lock"
_POLL_S = 0.02


class LockTimeoutError(Exception):
    """The node-wide prep/unprep lock was not acquired in time."""


class NodeLock:
    """`with lock:` holds the node-wide lock, waiting at most `timeout` seconds in all."""

    def __init__(self, path: Path, *, timeout: float) -> None:
        self._path = path
        self._timeout = timeout
        self._thread_lock = threading.Lock()
        self._fd = -1  # only the holder of _thread_lock touches it

    def __enter__(self) -> None:
        deadline = time.monotonic() + self._timeout
        if not self._thread_lock.acquire(timeout=self._timeout):
            raise LockTimeoutError(f"timed out after {self._timeout}s waiting for this process's lock")
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                self._flock(fd, deadline)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        os.close(self._fd)  # releases the flock
        self._fd = -1
        self._thread_lock.release()

    def _flock(self, fd: int, deadline: float) -> None:
        # flock has no timeout of its own: poll without blocking until the deadline.
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise LockTimeoutError(
                        f"timed out after {self._timeout}s waiting for flock on {self._path}"
                    ) from None
                time.sleep(min(_POLL_S, remaining))
