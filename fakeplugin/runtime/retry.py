"""Retries of the runtime's loops: an API call that failed is tried again later, never fatal.

Every loop that talks to the API server (the informers, the slice publisher) runs through `forever`, so
each waits the same way after a failure: 1 s, doubled on each failure in a row, at most MAX_SECONDS (the
cap client-go's reflector uses), back to 1 s after a success.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from fakeplugin.kube import describe_api_error

log = logging.getLogger(__name__)

FIRST_SECONDS = 1.0
MAX_SECONDS = 30.0


class Backoff:
    """The wait after each failure in a row: `first`, doubled each time, at most `maximum`."""

    def __init__(self, first: float = FIRST_SECONDS, maximum: float = MAX_SECONDS) -> None:
        self._first, self._maximum = first, maximum
        self._next = first

    def failed(self) -> float:
        """The seconds to wait now; the next failure waits twice as long."""
        delay, self._next = self._next, min(self._next * 2, self._maximum)
        return delay

    def reset(self) -> None:
        self._next = self._first


def forever(step: Callable[[], None], *, stop: threading.Event, what: str) -> None:
    """Run `step` until `stop`; a failure is logged ("<what> failed: ...") and retried with backoff. A
    step returns when it wants to run again (e.g. its watch ended)."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            step()
            backoff.reset()
        except Exception as exc:
            delay = backoff.failed()
            log.warning("%s failed: %s; retrying in %.0f s", what, describe_api_error(exc), delay)
            log.debug("%s failure", what, exc_info=True)
            stop.wait(delay)
