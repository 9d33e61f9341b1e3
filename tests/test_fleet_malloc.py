"""The fleet's malloc thresholds (fleet.malloc), in a child process of their own: glibc's default raises
its mmap threshold to a large block just freed, so the next large blocks come from (and stay in) its
arenas; fixed, they are mapped and unmapped on their own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakeplugin.fleet import malloc
from tests.harness.tooling import unavailable

CHILD = """
import ctypes, sys
from fakeplugin.fleet import malloc

class Info(ctypes.Structure):  # glibc's struct mallinfo2
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
if sys.argv[1] == "fixed":
    assert malloc.fix_thresholds()
freed = bytearray(8 << 20)  # mapped (above the first threshold), then freed
del freed
kept = bytearray(1 << 20)
print(libc.mallinfo2().hblkhd >= len(kept))  # mapped on its own, not from an arena
"""


@pytest.mark.parametrize(("thresholds", "mapped"), [("default", "False"), ("fixed", "True")])
def test_a_large_block_after_a_larger_one_is_freed_is_mapped_only_with_fixed_thresholds(
    thresholds: str, mapped: str
) -> None:
    if malloc._LIBC is None:
        unavailable("fleet.malloc needs glibc's malloc (libc.so.6 with mallopt)")
    child = [sys.executable, "-c", CHILD, thresholds]
    assert subprocess.run(child, capture_output=True, text=True, check=True).stdout.strip() == mapped
