"""The fleet's start-up heap kept out of Python's cyclic garbage collector (issue 32).

A fleet holds every served node's plugins and devices, its inventory and the listed nodes and pods,
nearly all alive until it stops (about 187,000 objects the collector tracks in each shard of 2500 nodes
of 8 GPUs). Every collection of the oldest generation walks all of them, so the collector's share of a
shard's CPU grew with the nodes it serves: 10.3 % of both shards' CPU samples in a wave at 5000 nodes,
3.6 % of one fleet's at 1000; 0.8 % at 5000 with the freeze (perf, docs/benchmarks.md "CPU per claim
pod against kwok's").

`freeze_start` collects once and then moves every object alive into the collector's permanent
generation (gc.freeze), which no later collection walks. Objects made later (pods, claims, nodes added
after the start) are collected as before. The bound on what this can keep: an object alive at the
freeze that later becomes garbage in a reference cycle stays until the process exits, so the fleet
never holds more of that than its heap at the start (a node of the start removed later, say; objects
without cycles are freed by their reference counts as always).
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)


def freeze_start() -> int:
    """Collect, then keep every object alive now out of later collections; returns how many."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%d objects of the start kept out of the cyclic garbage collector (fleet.heap)", frozen)
    return frozen
