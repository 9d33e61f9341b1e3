"""Fleet shards (fakeplugin.fleet.shard): every node in exactly one shard, the same in every process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fakeplugin.cluster.simulated import fleet_process, fleet_shards
from fakeplugin.fleet.shard import WHOLE, Shard, parse_shard

NAMES = [f"h200-{i}" for i in range(5000)]


@pytest.mark.parametrize("count", [1, 2, 3, 7])
def test_every_node_belongs_to_exactly_one_shard(count: int) -> None:
    owners = [[i for i in range(count) if Shard(i, count).owns(n)] for n in NAMES]
    assert all(len(o) == 1 for o in owners)
    sizes = [sum(1 for o in owners if o == [i]) for i in range(count)]
    assert min(sizes) > 0.9 * len(NAMES) / count  # crc32 spreads node names evenly


def test_the_split_is_the_same_in_another_process() -> None:
    names = NAMES[:50]
    code = f"from fakeplugin.fleet.shard import Shard; print([n for n in {names!r} if Shard(1, 2).owns(n)])"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other.strip() == str([n for n in names if Shard(1, 2).owns(n)])


def test_shard_specs_and_their_errors() -> None:
    assert parse_shard("1/2") == Shard(1, 2) and str(Shard(1, 2)) == "1/2"
    assert parse_shard("0/1") == WHOLE and all(WHOLE.owns(n) for n in NAMES[:10])
    for bad in ("2/2", "1", "-1/2", "0/0", "a/b"):
        with pytest.raises(ValueError, match=r"expected i/n with 0 <= i < n"):
            parse_shard(bad)


def test_cluster_up_runs_two_fleets_above_a_thousand_simulated_nodes() -> None:
    assert [fleet_shards(n) for n in (0, 1000, 1001, 5000)] == [1, 1, 2, 2]
    assert (fleet_process(0, 1), fleet_process(1, 2)) == ("fleet", "fleet/1")
