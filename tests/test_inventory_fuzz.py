"""Inventory fuzzing: seeded random and hostile documents through `fakeplugin validate --inventory F`.

Every document must end with exit 0 and a `valid` line for a valid inventory, or exit 1 with every line
naming the file (`<file>: ...`, then `N problems in <file>`): never a traceback, never the CLI's catch-all
`fakeplugin validate: error:` line, always within generous time and memory bounds.

Random documents run in-process (`commands.validate.run`, so any exception escapes to the test); hostile ones
(bombs, deep nesting, oversized files) run as real processes under RLIMIT_AS and RLIMIT_CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.commands import validate
from fakeplugin.inventory.fields import MAX_FILE_BYTES
from fakeplugin.profiles import profile_names

ROOT = Path(__file__).resolve().parent.parent
SEEDS = range(8)
DOCS_PER_SEED = 60
DOC_SECONDS = 5.0  # per in-process document: a safety bound, far above the real cost
RSS_GROWTH_MIB = 200  # over all in-process documents
PROCESS_MEMORY = 1 << 30  # RLIMIT_AS of a validate process
PROCESS_CPU_S = 30  # RLIMIT_CPU of a validate process
PROCESS_TIMEOUT_S = 60

FIELDS = (
    "driverVersion", "cudaDriverVersion", "nodes", "name", "selector", "matchLabels", "labels", "kubelet",
    "gpus", "profile", "count", "ecc", "memory", "productName", "uuid", "pciBusID", "mig", "placement",
)  # fmt: skip
NASTY_TEXT = (
    "", " ", "\t", "~", "null", "yes", "0x1f", "1:2:3", "-", "&a", "*a", "!!binary", "../../etc/passwd",
    "GPU-", "h200", "1g.18gb", "23028Mi", "1Ti", "1e400", "é", "你好", "\u202e", "\ufeff", "a" * 300,
)  # fmt: skip
VALID = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {"name": "t10-node", "labels": {"gpu-type": "t10"}, "gpus": [{"profile": "t10", "count": 2}]},
        {"selector": {"matchLabels": {"gpu-type": "h200"}}, "gpus": [{"profile": "h200", "count": 8}]},
        {
            "name": "mig-node",
            "gpus": [
                {"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]},
                {"profile": "rtx-a5000", "ecc": True, "uuid": "GPU-016f1449-6321-444f-9645-e8ab02e0042f"},
            ],
        },
        {"name": "worker"},
    ],
}


# -- generators ---------------------------------------------------------------------------------------------


def scalar(rng: random.Random) -> Any:
    kind = rng.randrange(9)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-3, 70)
    if kind == 2:
        return rng.choice([10**8, 2**63, -(10**30), 10 ** rng.randint(20, 900)])
    if kind == 3:
        return rng.choice([0.5, -1.0, float("inf"), float("nan"), 1e308])
    if kind == 4:
        return rng.choice(FIELDS)
    if kind == 5:
        return rng.choice(profile_names())
    if kind == 6:
        return rng.choice(NASTY_TEXT)
    alphabet = "abc-._/: \t\n'\"#&*!%@`|>{}[],é😀\x00\x07\x1b\x7f\x85\u2028"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80 if kind < 8 else 2000)))


def value(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.35:
        return scalar(rng)
    if rng.random() < 0.5:
        return [value(rng, depth - 1) for _ in range(rng.randint(0, 5))]
    keys = [rng.choice(FIELDS) if rng.random() < 0.7 else scalar(rng) for _ in range(rng.randint(0, 6))]
    out: dict[Any, Any] = {}
    for key in keys:
        with contextlib.suppress(TypeError):  # an unhashable scalar never comes, but be explicit
            out[key] = value(rng, depth - 1)
    return out


def mutate(rng: random.Random, data: Any, depth: int = 0) -> Any:
    """`data` with one random change somewhere: a replaced, dropped, added or duplicated part."""
    if isinstance(data, dict) and data and rng.random() < 0.75:
        key = rng.choice(list(data))
        out = dict(data)
        roll = rng.random()
        if roll < 0.5:
            out[key] = mutate(rng, data[key], depth + 1)
        elif roll < 0.65:
            del out[key]
        elif roll < 0.8:
            out[rng.choice(FIELDS)] = value(rng, 3)
        else:
            out[key] = value(rng, 4)
        return out
    if isinstance(data, list) and data and rng.random() < 0.75:
        out_list = list(data)
        i = rng.randrange(len(out_list))
        roll = rng.random()
        if roll < 0.6:
            out_list[i] = mutate(rng, out_list[i], depth + 1)
        elif roll < 0.75:
            del out_list[i]
        else:
            out_list += [out_list[i]] * rng.choice([1, 2, 70, 5001])
        return out_list
    return value(rng, 3) if rng.random() < 0.5 else scalar(rng)


def structured(rng: random.Random) -> bytes:
    data = VALID
    for _ in range(rng.randint(0, 3)):
        data = mutate(rng, data)
    flow = rng.choice([None, True, False])
    return yaml.safe_dump(data, default_flow_style=flow, allow_unicode=rng.random() < 0.5).encode()


def random_yaml(rng: random.Random) -> bytes:
    return yaml.safe_dump(value(rng, rng.randint(0, 8)), allow_unicode=rng.random() < 0.5).encode()


def text_mutation(rng: random.Random) -> bytes:
    """Byte-level damage to a valid file: YAML syntax, tabs, control characters, non-UTF-8, anchors."""
    data = bytearray(yaml.safe_dump(VALID, default_flow_style=rng.choice([None, False])).encode())
    inserts = [b"\xff", b"\xc3", b"\t", b"\x00", b"\x1b", b"&a ", b"*a", b"<<: ", b"[", b"{", b": ", b"- ",
               b"\n", b"'", b'"', b"!!python/object:os.system ", b"%YAML 1.1\n", b"---\n",
               b"\xef\xbb\xbf"]  # fmt: skip
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(data) + 1)
        roll = rng.random()
        if roll < 0.5:
            data[at:at] = rng.choice(inserts)
        elif roll < 0.7:
            del data[at : at + rng.randint(1, 20)]
        elif roll < 0.85:
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            del data[at:]
    return bytes(data)


def alias_bomb(rng: random.Random) -> bytes:
    """Nested aliases (billion laughs), lists or mappings, random width and depth: 10^4 .. 10^15 values."""
    width, levels = rng.randint(4, 12), rng.randint(7, 14)
    lines = ["l0: &l0 [x, y, z]"]
    for i in range(1, levels):
        refs = [f"*l{i - 1}" for _ in range(width)]
        if rng.random() < 0.5:
            lines.append(f"l{i}: &l{i} [{', '.join(refs)}]")
        else:
            lines.append(f"l{i}: &l{i} {{{', '.join(f'k{j}: {r}' for j, r in enumerate(refs))}}}")
    lines.append(f"nodes: [{{name: n, gpus: *l{levels - 1}}}]")
    return ("\n".join(lines) + "\n").encode()


def deep(rng: random.Random) -> bytes:
    n = rng.choice([17, 100, 5000, 200_000])
    if rng.random() < 0.5:
        return ("nodes: " + "[" * n + "]" * n + "\n").encode()
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(min(n, 3000))).encode() + b"  " * 3000 + b"x\n"


HOSTILE: dict[str, Callable[[], bytes]] = {
    "count-1e8": lambda: yaml.safe_dump(
        {**VALID, "nodes": [{"name": "n", "gpus": [{"profile": "h200", "count": 100_000_000}]}]}
    ).encode(),
    "6000-nodes": lambda: yaml.safe_dump(
        {**VALID, "nodes": [{"name": f"n{i}"} for i in range(6000)]}
    ).encode(),
    "oversized": lambda: b"# x\n" * (MAX_FILE_BYTES // 4 + 1),
    "just-under-1mib-of-comments": lambda: b"#" * (MAX_FILE_BYTES - 100) + b"\nnodes: []\n",
    "flat-list-of-300k": lambda: b"nodes: [" + b"1," * 300_000 + b"1]\n",
    "huge-int": lambda: b"nodes: " + b"9" * 900_000 + b"\n",
    "sexagesimal": lambda: b"nodes: 1" + b":59" * 300_000 + b"\n",
    "recursive-alias": lambda: b"nodes: &a [{name: n, gpus: *a}]\n",
    "utf-16": lambda: yaml.safe_dump(VALID).encode("utf-16"),
    "binary-noise": lambda: random.Random(1).randbytes(200_000),
    "python-tag": lambda: b"nodes: !!python/object/apply:os.system ['true']\n",
}


# -- running ------------------------------------------------------------------------------------------------


def check_output(path: Path, rc: int, out: str, err: str) -> None:
    assert "Traceback" not in out + err, err
    if rc == 0:
        assert out.startswith(f"{path}: valid: ") and err == "", (out, err)
        return
    assert rc == 1, (rc, err)
    lines = err.splitlines()
    assert lines, "exit 1 without a message"
    problems = lines[:-1]
    assert problems and all(line.startswith(f"{path}: ") for line in problems), err[:2000]
    n = len(problems)
    assert lines[-1] == f"{n} problem{'s' if n > 1 else ''} in {path}", lines[-1]


def validate_in_process(path: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = validate.run(argparse.Namespace(inventory=str(path), parser=None))
    return rc, out.getvalue(), err.getvalue()


# The limits are set by a small Python that then execs `fakeplugin validate`, not by a preexec_fn: that
# forks this process (which has gRPC's threads by now) and runs gRPC's fork handlers in the child, whose
# poller once wrote "epoll_wait error: Bad file descriptor" into the child's stderr.
_LIMITED = (
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_AS, ({PROCESS_MEMORY}, {PROCESS_MEMORY})); "
    f"resource.setrlimit(resource.RLIMIT_CPU, ({PROCESS_CPU_S}, {PROCESS_CPU_S})); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


GENERATORS = {"structured": structured, "random": random_yaml, "bytes": text_mutation}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_documents_validate_or_name_the_file(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    outcomes = {0: 0, 1: 0}
    for i in range(DOCS_PER_SEED):
        kind = rng.choice(list(GENERATORS))
        path = tmp_path / f"seed{seed}-doc{i}-{kind}.yaml"
        path.write_bytes(GENERATORS[kind](rng))
        started = time.monotonic()
        rc, out, err = validate_in_process(path)
        assert time.monotonic() - started < DOC_SECONDS, f"{path} took too long"
        check_output(path, rc, out, err)
        outcomes[rc] += 1
    growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert growth_mib < RSS_GROWTH_MIB
    assert outcomes[1] > 0  # the generators do produce invalid documents


def test_the_generators_also_produce_valid_inventories(tmp_path: Path) -> None:
    """Mutation starts from a valid document, so structure-aware fuzzing reaches deep fields."""
    rng = random.Random(0)
    valid = 0
    for i in range(40):
        path = tmp_path / f"doc{i}.yaml"
        path.write_bytes(structured(rng))
        rc, out, err = validate_in_process(path)
        check_output(path, rc, out, err)
        valid += rc == 0
    assert valid >= 5


def hostile_documents() -> list[tuple[str, Callable[[], bytes]]]:
    seeded = [(f"alias-bomb-{s}", lambda s=s: alias_bomb(random.Random(s))) for s in range(3)]
    seeded += [(f"deep-{s}", lambda s=s: deep(random.Random(s))) for s in range(3)]
    return [*HOSTILE.items(), *seeded]


@pytest.mark.parametrize(("name", "make"), hostile_documents(), ids=[n for n, _ in hostile_documents()])
def test_hostile_documents_are_refused_by_a_bounded_process(
    tmp_path: Path, name: str, make: Callable[[], bytes]
) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(make())
    result = subprocess.run(
        [sys.executable, "-c", _LIMITED, "-m", "fakeplugin", "validate", "--inventory", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
    )
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr[-2000:])
    check_output(path, result.returncode, result.stdout, result.stderr)
