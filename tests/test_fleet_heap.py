"""The fleet's start-up heap out of the cyclic collector (fleet.heap), in a child process of its own (a
freeze is for the rest of a process): what was alive at the freeze is walked by no later collection,
what is made later is collected as before."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import gc, json
from fakeplugin.fleet import heap

class Node:
    def __init__(self):
        self.me = self  # a cycle: only the cyclic collector frees it

start = [Node() for _ in range(5000)]
frozen = heap.freeze_start()
oldest_after_freeze = len(gc.get_objects(generation=2))
later = Node()
later_id = id(later)
del later
collected = gc.collect()
print(json.dumps({"frozen": frozen, "oldest": oldest_after_freeze, "collected": collected,
                  "later_alive": any(id(o) == later_id for o in gc.get_objects())}))
"""


def test_objects_of_the_start_are_frozen_and_later_cycles_are_still_collected() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["frozen"] >= 5000 * 2  # each Node and its __dict__ at least
    assert seen["oldest"] < 100  # no later collection walks them: the oldest generation is empty
    assert seen["collected"] >= 1 and not seen["later_alive"]  # a cycle made after the freeze is freed
