"""bench/prepare_vs_anchor.py's table, goals and round order, from fabricated results (no cluster)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
KEYS = (
    "prepare_p50_ms",
    "prepare_p99_ms",
    "unprepare_p50_ms",
    "unprepare_p99_ms",
    "concurrent_prepare_per_s",
    "concurrent_prepare_p50_ms",
    "concurrent_prepare_cores",
    "concurrent_unprepare_per_s",
    "rss_idle_kib",
    "rss_peak_idle_kib",
    "rss_peak_kib",
    "startup_ms",
)


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """The script as a module: it imports its siblings (common, prepare_latency) by name, as a script."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(BENCH))
        module = importlib.import_module("prepare_vs_anchor")
        yield module
    sys.modules.pop("prepare_vs_anchor", None)


def plugin(**values: float) -> dict[str, float]:
    """One plugin's summary: every key 1.0 but those given."""
    return {key: 1.0 for key in KEYS} | values


def results(bench: ModuleType) -> dict:
    return {
        "machine": "2 cores, 8 GiB, Python 3.11.7",
        "claims": 64,
        "rounds": 4,
        "concurrency": 16,
        "fakeplugin_128": {"startup_ms": 410.0, "rss_idle_kib": 60 * 1024},
        bench.OURS: plugin(
            prepare_p50_ms=3.0,
            unprepare_p50_ms=1.5,
            concurrent_prepare_per_s=300.0,
            rss_peak_kib=56 * 1024,
            startup_ms=280.0,
        ),
        bench.GO: plugin(prepare_p50_ms=1.2, unprepare_p50_ms=1.0, concurrent_prepare_per_s=900.0),
        bench.DURABLE: plugin(prepare_p50_ms=2.8, unprepare_p50_ms=1.4, concurrent_prepare_per_s=400.0),
        bench.NVIDIA: plugin(prepare_p50_ms=6.0, unprepare_p50_ms=4.0, concurrent_prepare_per_s=40.0),
    }


def test_the_goals_are_judged_on_ratios_to_their_anchor_or_on_our_own_value(bench: ModuleType) -> None:
    verdicts = bench.goal_verdicts(results(bench))
    assert verdicts == {
        "prepare_p50_ms": [
            {"goal": "\u2264 1.2\u00d7 durable", "value": 1.071, "met": True},  # 3.0 / 2.8
            {"goal": "\u2264 2\u00d7 floor", "value": 2.5, "met": False},  # 3.0 / 1.2
        ],
        "concurrent_prepare_per_s": [{"goal": "\u2265 0.7\u00d7 durable", "value": 0.75, "met": True}],
        "unprepare_p50_ms": [{"goal": "\u2264 2\u00d7 floor", "value": 1.5, "met": True}],
        "rss_peak_kib": [{"goal": "\u2264 55 MiB", "value": 56 * 1024, "met": False}],
        "startup_ms": [{"goal": "\u2264 300 ms", "value": 280.0, "met": True}],
    }


def test_the_table_has_a_column_per_plugin_our_ratio_to_each_anchor_and_the_goals(bench: ModuleType) -> None:
    lines = bench.render(results(bench)).splitlines()
    assert lines[0] == "64 one-device claims per plugin, 4 interleaved rounds; 2 cores, 8 GiB, Python 3.11.7"
    assert lines[2] == (
        "| | fakeplugin | Go floor | Go durable | NVIDIA model | ours / Go floor | ours / Go durable "
        "| ours / NVIDIA model | goal |"
    )
    assert lines[3] == "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    rows = {line.split(" | ")[0].removeprefix("| "): line for line in lines[4:]}
    assert rows["Prepare sequential p50"] == (
        "| Prepare sequential p50 | 3.00 ms | 1.20 ms | 2.80 ms | 6.00 ms "
        "| 2.50\u00d7 | 1.07\u00d7 | 0.50\u00d7 "
        "| \u2264 1.2\u00d7 durable \u2714; \u2264 2\u00d7 floor \u2718 |"
    )
    assert rows["Prepare, 16 concurrent callers: throughput"] == (
        "| Prepare, 16 concurrent callers: throughput | 300 /s | 900 /s | 400 /s | 40 /s "
        "| 0.33\u00d7 | 0.75\u00d7 | 7.50\u00d7 | \u2265 0.7\u00d7 durable \u2714 |"
    )
    assert rows["RSS peak (VmHWM, whole run)"].endswith("| \u2264 55 MiB \u2718 |")
    assert rows["startup to first GetInfo (64 devices)"].startswith(
        "| startup to first GetInfo (64 devices) | 280 ms |"
    )
    assert rows["startup to first GetInfo (64 devices)"].endswith("| \u2264 300 ms \u2714 |")
    assert rows["Prepare sequential p99"].endswith("| 1.00\u00d7 |  |")  # no goal: an empty cell
    # Our plugin alone: its 128-device start, with the other cells empty.
    assert (
        rows["RSS idle, 128 devices published"]
        == "| RSS idle, 128 devices published | 60.0 MiB |  |  |  |  |  |  |  |"
    )
    assert all(line.count(" | ") == 8 for line in lines[2:])  # 9 cells in every row


def test_each_round_starts_one_plugin_later(bench: ModuleType) -> None:
    plugins = ("a", "b", "c", "d")
    orders = [bench.rotated(plugins, r) for r in range(5)]
    assert orders == [
        ("a", "b", "c", "d"),
        ("b", "c", "d", "a"),
        ("c", "d", "a", "b"),
        ("d", "a", "b", "c"),
        ("a", "b", "c", "d"),
    ]
    assert all(sorted(place) == list(plugins) for place in zip(*orders[:4], strict=True))
