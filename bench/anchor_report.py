"""bench/prepare_vs_anchor.py's results: the plugins' labels, the raw samples of one plugin, where our
plugin's Prepare and Unprepare spend their time (py-spy: recorded during the sequential phases, read back as
time shares), and the table with issue 32's goals.

bench/prepare_vs_anchor.py imports it by name, as it does its siblings (common, prepare_latency).
"""

from __future__ import annotations

import linecache
import signal
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

OURS, GO, DURABLE, NVIDIA = "fakeplugin", "go-driver", "go-durable", "nvidia-model"
HEADS = {OURS: "fakeplugin", GO: "Go floor", DURABLE: "Go durable", NVIDIA: "NVIDIA model"}


@dataclass
class Samples:
    """Raw measurements of one plugin over all rounds."""

    sequential: dict[str, list[float]] = field(default_factory=lambda: {"prepare": [], "unprepare": []})
    concurrent: dict[str, list[float]] = field(default_factory=lambda: {"prepare": [], "unprepare": []})
    concurrent_latency: list[float] = field(default_factory=list)
    concurrent_cores: list[float] = field(default_factory=list)  # plugin CPU s per wall s, concurrent Prepare


@contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy recording `pid` into `out` (collapsed stacks, idle time included) while the block runs.

    --nonblocking: the process is not paused per sample (pausing it at this rate doubles its latency).
    """
    if out is None:
        yield
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [
        "py-spy",
        "record",
        "--pid",
        str(pid),
        "--rate",
        str(PY_SPY_RATE),
        "--full-filenames",
        "--nonblocking",
        "--idle",
        "--format",
        "raw",
        "-o",
        str(out),
    ]
    t0 = time.perf_counter()
    spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached and sampling
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        out.with_suffix(".seconds").write_text(f"{time.perf_counter() - t0:.3f}\n")
        _, err = spy.communicate(timeout=30)
        if not out.exists():
            raise SystemExit(f"py-spy wrote nothing: {err.decode()[-2000:]}")


# A sampled stack of a Prepare/Unprepare worker thread is charged to "<area>: <kind>". Area: the
# innermost frame of ours that names one (else "preparer"); kind: what the innermost frame does (an
# fsync call on its source line, else the first rule matching it or a frame further out). Frames look
# like `Class.function (/full/path.py:12)` (py-spy --full-filenames).
AREAS: list[tuple[str, Callable[[str], bool]]] = [
    ("claim GET", lambda f: "fakeplugin/kube.py:" in f),
    ("checkpoint", lambda f: "fakeplugin/drivers/gpu/prepare/checkpoint.py:" in f),
    ("CDI spec", lambda f: "fakeplugin/drivers/gpu/prepare/cdispec.py:" in f),
    ("nvidia-smi data", lambda f: "fakeplugin/drivers/gpu/prepare/smi.py:" in f),
    ("node lock", lambda f: _function(f) in ("_locked", "_claim_lock")),
    ("logging", lambda f: "/logging/" in f),
]
KINDS: list[tuple[str, Callable[[str], bool]]] = [
    ("socket I/O (waiting for the API server)", lambda f: "/socket.py:" in f or "/ssl.py:" in f),
    ("urllib3/http.client", lambda f: "/urllib3/" in f or "/http/client.py:" in f),
    ("json", lambda f: "/json/" in f),
    ("yaml", lambda f: "/yaml/" in f),
    ("pydantic", lambda f: "/pydantic" in f),
    ("kubernetes client", lambda f: "/kubernetes/" in f),
    ("file ops (temp file, write, rename)", lambda f: "atomicfile.py:" in f or "/tempfile.py:" in f),
]
PY_SPY_RATE = 250
# runtime.claims prepare() and unprepare(): a call's time in the core (the claim GET and checks, the Preparer)
CORE = "fakeplugin/runtime/claims.py:"


def profile_shares(files: list[Path], ours: Samples) -> dict:
    """Per operation: where the worker thread's time goes, in ms per call and as a share of Preparer time.

    A sample stands for (recording duration / samples of the main thread) seconds: py-spy does not always
    keep its nominal rate. Each profile file has a `.seconds` file with its recording duration.
    """
    out: dict = {}
    for op in ("prepare", "unprepare"):
        ms: Counter[str] = Counter()
        for path in files:
            stacks = [_parse(line) for line in path.read_text().splitlines() if line.strip()]
            main_samples = sum(n for frames, n in stacks if _function(frames[0]) == "_run_module_as_main")
            period_ms = float(path.with_suffix(".seconds").read_text()) * 1000 / max(main_samples, 1)
            for frames, n in stacks:
                if any(_function(f) == op and CORE in f for f in frames):
                    ms[_category(frames)] += n * period_ms
        calls = len(ours.sequential[op])
        in_core = sum(ms.values()) / calls
        client_ms = statistics.mean(ours.sequential[op]) * 1000
        out[op] = {
            "client_mean_ms": round(client_ms, 3),
            "in_preparer_ms": round(in_core, 3),
            "preparer_ms_by_category": {k: round(v / calls, 3) for k, v in ms.most_common()},
        }
    return out


def _parse(line: str) -> tuple[list[str], int]:
    stack, _, n = line.rpartition(" ")
    return stack.split(";"), int(n)


def _function(frame: str) -> str:
    """`Class.method (/path.py:1)` -> `method`."""
    return frame.partition(" (")[0].rpartition(".")[2]


def _category(frames: list[str]) -> str:
    area = next((a for f in reversed(frames) for a, match in AREAS if match(f)), "preparer")
    _, _, where = frames[-1].rstrip(")").partition(" (")
    path, _, line = where.rpartition(":")
    if line.isdigit() and "fsync(" in linecache.getline(path, int(line)):
        return f"{area}: fsync"
    kind = next((k for f in reversed(frames) for k, match in KINDS if match(f)), "python")
    return f"{area}: {kind}"


# Issue 32's goals: per result key, (goal, the anchor the ratio is to or None for our own value, bound,
# whether the value must be at least the bound).
GOALS: dict[str, list[tuple[str, str | None, float, bool]]] = {
    "prepare_p50_ms": [
        ("\u2264 1.2\u00d7 durable", DURABLE, 1.2, False),
        ("\u2264 2\u00d7 floor", GO, 2.0, False),
    ],
    "concurrent_prepare_per_s": [("\u2265 0.7\u00d7 durable", DURABLE, 0.7, True)],
    "unprepare_p50_ms": [("\u2264 2\u00d7 floor", GO, 2.0, False)],
    "rss_peak_kib": [("\u2264 55 MiB", None, 55 * 1024, False)],
    "startup_ms": [("\u2264 300 ms", None, 300, False)],
}
MARK = {True: "\u2714", False: "\u2718"}


def goal_verdicts(r: dict) -> dict[str, list[dict]]:
    """Per result key with goals: each goal, the value it is judged on (a ratio ours / anchor, or ours) and
    whether it is met."""
    out: dict[str, list[dict]] = {}
    for key, goals in GOALS.items():
        for goal, anchor, bound, at_least in goals:
            value = r[OURS][key] / r[anchor][key] if anchor else r[OURS][key]
            met = value >= bound if at_least else value <= bound
            out.setdefault(key, []).append({"goal": goal, "value": round(value, 3), "met": met})
    return out


def render(r: dict) -> str:
    """The results as a markdown table: a column per plugin, ours / each anchor (> 1 means we are slower
    or bigger), and issue 32's goals, \u2714 met or \u2718 not."""
    verdicts = goal_verdicts(r)
    anchors = (GO, DURABLE, NVIDIA)

    def row(name: str, key: str, unit: str, scale: float = 1.0, digits: int = 2) -> str:
        values = [f"{r[label][key] * scale:.{digits}f} {unit}".rstrip() for label in (OURS, *anchors)]
        ratios = [f"{r[OURS][key] / r[a][key]:.2f}\u00d7" if r[a][key] else "" for a in anchors]
        goals = "; ".join(f"{v['goal']} {MARK[v['met']]}" for v in verdicts.get(key, []))
        return "| " + " | ".join([name, *values, *ratios, goals]) + " |"

    def ours_only(name: str, value: str) -> str:
        return "| " + " | ".join([name, value] + [""] * (2 * len(anchors) + 1)) + " |"

    mib = 1 / 1024
    n, c = r["claims"], r["concurrency"]
    heads = [HEADS[label] for label in (OURS, *anchors)] + [f"ours / {HEADS[a]}" for a in anchors]
    lines = [
        f"{n} one-device claims per plugin, {r['rounds']} interleaved rounds; {r['machine']}",
        "",
        "| | " + " | ".join(heads) + " | goal |",
        "| --- " * (len(heads) + 2) + "|",
        row("Prepare sequential p50", "prepare_p50_ms", "ms"),
        row("Prepare sequential p99", "prepare_p99_ms", "ms"),
        row("Unprepare sequential p50", "unprepare_p50_ms", "ms"),
        row("Unprepare sequential p99", "unprepare_p99_ms", "ms"),
        row(f"Prepare, {c} concurrent callers: throughput", "concurrent_prepare_per_s", "/s", digits=0),
        row(f"Prepare, {c} concurrent callers: p50", "concurrent_prepare_p50_ms", "ms"),
        row(f"Prepare, {c} callers: plugin CPU (cores busy)", "concurrent_prepare_cores", "", digits=2),
        row(f"Unprepare, {c} concurrent callers: throughput", "concurrent_unprepare_per_s", "/s", digits=0),
        row(f"RSS idle, {n} devices published", "rss_idle_kib", "MiB", mib, 1),
        ours_only("RSS idle, 128 devices published", f"{r['fakeplugin_128']['rss_idle_kib'] * mib:.1f} MiB"),
        row("RSS peak before the first call (VmHWM)", "rss_peak_idle_kib", "MiB", mib, 1),
        row("RSS peak (VmHWM, whole run)", "rss_peak_kib", "MiB", mib, 1),
        row(f"startup to first GetInfo ({n} devices)", "startup_ms", "ms", digits=0),
        ours_only("startup to first GetInfo (128 devices)", f"{r['fakeplugin_128']['startup_ms']:.0f} ms"),
    ]
    if "profile" in r:
        for op, prof in r["profile"].items():
            core = prof["in_preparer_ms"]
            lines += [
                "",
                f"{op} under py-spy: {prof['client_mean_ms']:.2f} ms per call at the client, "
                f"{core:.2f} ms of it in the Preparer's worker thread "
                "(the rest: the gRPC server and the client):",
                "",
                "| Preparer thread: area: kind | ms per call | share of Preparer time |",
                "| --- | --- | --- |",
            ]
            for label, v in prof["preparer_ms_by_category"].items():
                lines.append(f"| {label} | {v:.3f} | {100 * v / core:.0f} % |")
    return "\n".join(lines)
