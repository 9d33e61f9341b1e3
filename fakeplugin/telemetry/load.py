"""The simulated load of a GPU: the `fakeplugin.dev/gpu-load` annotation on a Pod or a ResourceClaim (pure).

    fakeplugin.dev/gpu-load: "utilization=90,memory=60"     # or just "90": memory follows utilization

Percentages, whole numbers 0 to 100. On a ResourceClaim it is the load of the claim's devices; on a Pod,
of every device of every claim the pod uses; a claim's own annotation wins for its devices (`effective`).
A bad value is a `LoadError` naming the object and the annotation: the caller logs it and the devices stay
idle; it never stops a render.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ANNOTATION = "fakeplugin.dev/gpu-load"
MAX_VALUE_LENGTH = 64  # "utilization=100,memory=100" is 26


class LoadError(ValueError):
    """A gpu-load annotation that cannot be parsed."""


@dataclass(frozen=True)
class Load:
    """What a workload does to its GPU, in percent: SM utilization and framebuffer used."""

    utilization: int = 0
    memory: int = 0


IDLE = Load()


def format_load(utilization: int, memory: int | None = None) -> str:
    """The annotation value for `utilization` (and `memory`, default: follows utilization); LoadError when
    either is not a whole number 0..100."""
    for name, value in (("utilization", utilization), ("memory", memory)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100
        ):
            raise LoadError(f"gpu load: {name} {value!r}: a whole number of percent, 0 to 100")
    return f"utilization={utilization}" + ("" if memory is None else f",memory={memory}")


def parse_load(value: str, where: str) -> Load:
    """The load of annotation `value` on the object `where` names (`claim ns/name`, `pod ns/name`)."""
    if len(value) > MAX_VALUE_LENGTH:
        raise LoadError(
            f"{where}: annotation {ANNOTATION}: {len(value)} characters, at most {MAX_VALUE_LENGTH}"
        )
    parts: dict[str, int] = {}
    entries = [e.strip() for e in value.split(",")]
    if len(entries) == 1 and "=" not in entries[0]:
        entries = [f"utilization={entries[0]}"]
    for entry in entries:
        key, sep, number = (p.strip() for p in entry.partition("="))
        if not sep or key not in ("utilization", "memory") or key in parts:
            raise _bad(value, where, f"entry {entry!r}")
        if not number.isascii() or not number.isdigit() or int(number) > 100:
            raise _bad(value, where, f"{key} {number!r} is not a whole number 0 to 100")
        parts[key] = int(number)
    if "utilization" not in parts:
        raise _bad(value, where, "no utilization")
    return Load(parts["utilization"], parts.get("memory", parts["utilization"]))


def _bad(value: str, where: str, problem: str) -> LoadError:
    return LoadError(
        f"{where}: annotation {ANNOTATION}={value!r}: {problem}; expected utilization=N[,memory=M] or N "
        "(percent, 0 to 100)"
    )


def object_load(obj: Mapping[str, Any], kind: str) -> Load | None:
    """The load an object's annotation sets (None: it has none). LoadError names `kind ns/name`."""
    meta = obj.get("metadata") or {}
    value = (meta.get("annotations") or {}).get(ANNOTATION)
    if value is None:
        return None
    return parse_load(value, f"{kind} {meta.get('namespace', '')}/{meta.get('name', '')}")


def busiest(loads: Iterable[Load | None]) -> Load | None:
    """The highest utilization and memory among `loads` (None: none given): a device several workloads
    share carries all of them, and the busiest bounds what the GPU shows."""
    known = [load for load in loads if load is not None]
    if not known:
        return None
    return Load(max(load.utilization for load in known), max(load.memory for load in known))


def effective(claims: Iterable[Load | None], pods: Iterable[Load | None]) -> Load:
    """A device's load: its claims' annotations (a claim's wins for its devices), else its pods', else
    idle."""
    return busiest(claims) or busiest(pods) or IDLE
