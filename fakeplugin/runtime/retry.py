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


def delay(failures: int, first: float = FIRST_SECONDS, maximum: float = MAX_SECONDS) -> float:
    """The wait after `failures` failures in a row: `first` after the first, doubled each time, at most
    `maximum`. The one backoff rule of fakeplugin: the runtime's loops (`Backoff`), the ComputeDomain
    plugin's retries within a Prepare, the fleet's pods."""
    return min(first * 2 ** min(failures - 1, 64), maximum)


class Backoff:
    """The wait after each failure in a row (`delay`), until `reset`."""

    def __init__(self, first: float = FIRST_SECONDS, maximum: float = MAX_SECONDS) -> None:
        self._first, self._maximum = first, maximum
        self._failures = 0

    def failed(self) -> float:
        """The seconds to wait now; the next failure waits twice as long."""
        self._failures += 1
        return delay(self._failures, self._first, self._maximum)

    def reset(self) -> None:
        self._failures = 0


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
