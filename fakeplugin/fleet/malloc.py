"""glibc's malloc set, at a fleet's start, to give back what a wave of pods freed (issue 32).

Part of what grew in a fleet under churn (docs/benchmarks.md, "Memory under churn"; the rest was the
periodic re-list of the pods, fleet.kubelet) was not Python's objects but the free memory glibc's malloc
kept in its per-thread arenas. By default glibc raises its mmap threshold to the size of each large
block freed (up to 32 MiB), and its trim threshold to twice that: once the fleet freed a list answer of
a few MiB, blocks that large come from a thread's arena instead of a mapping of their own, and up to
twice that stays free at the top of each arena, in each of the up to 8 x cores arenas of its threads.

Fixed thresholds (mallopt; setting one turns the adjustment off): a block of `MMAP_THRESHOLD` or more
is mapped and unmapped on its own, and free memory above `TRIM_THRESHOLD` at the top of an arena is
given back. (malloc_trim after a wave was measured too: it gave back nothing more, docs/benchmarks.md.)

Not glibc (musl, say): nothing is done.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
MMAP_THRESHOLD = 128 * 1024  # glibc's own starting value
TRIM_THRESHOLD = 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt  # noqa: B018 - glibc's, or the AttributeError below
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def fix_thresholds() -> bool:
    """Fixed mmap and trim thresholds for the rest of the process; False when not glibc."""
    if _LIBC is None:
        return False
    ok = _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) and _LIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not ok:
        log.warning("mallopt refused the mmap and trim thresholds: RSS may grow with the pods served")
    return bool(ok)
