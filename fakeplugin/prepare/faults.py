"""Faults on demand for one claim: its `fakeplugin.dev/*` annotations, parsed and checked (pure).

A ResourceClaim (or a ResourceClaimTemplate's `spec.metadata`, which the resourceclaim controller copies
into every claim it makes from the template: pkg/controller/resourceclaim/controller.go,
`handleClaim`, `Annotations: template.Spec.ObjectMeta.Annotations`) may carry:

    fakeplugin.dev/prepare-error: "<message>"     every Prepare of the claim fails with this message
    fakeplugin.dev/prepare-fail-count: "N"        the first N Prepare attempts fail, later ones succeed
    fakeplugin.dev/prepare-delay: "<duration>"    Prepare waits this long first (Go duration, ≤ 10m)
    fakeplugin.dev/unprepare-error: "<message>"   every Unprepare of the claim fails with this message

A bad value is a `ClaimFaultError` naming the annotation and the value; the Preparer fails that claim
with it (never the call, never the plugin).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PREFIX = "fakeplugin.dev/"
PREPARE_ERROR = PREFIX + "prepare-error"
PREPARE_FAIL_COUNT = PREFIX + "prepare-fail-count"
PREPARE_DELAY = PREFIX + "prepare-delay"
UNPREPARE_ERROR = PREFIX + "unprepare-error"
CLAIM_ANNOTATIONS = (PREPARE_ERROR, PREPARE_FAIL_COUNT, PREPARE_DELAY, UNPREPARE_ERROR)

MAX_DELAY_S = 600.0  # 10m: longer only holds one of the plugin's worker threads for nothing
MAX_FAIL_COUNT = 1000  # at the kubelet's ~10 s retry backoff, close to three hours of failures
MAX_MESSAGE = 1024  # a message ends up in a pod event; the kubelet truncates those anyway

# Go's time.ParseDuration units (time/format.go, unitMap), in seconds.
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


class ClaimFaultError(ValueError):
    """A fakeplugin.dev annotation of a claim has a value that cannot be used."""


@dataclass(frozen=True)
class ClaimFaults:
    """What a claim's annotations ask for; the defaults ask for nothing."""

    prepare_error: str = ""
    prepare_fail_count: int = 0
    prepare_delay_s: float = 0.0
    unprepare_error: str = ""


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (`250ms`, `3s`, `1m30s`, `1.5h`); ValueError otherwise.

    As Go's time.ParseDuration, except that a sign is refused (a delay is never negative) and a bare
    `0` is accepted as Go does."""
    if text == "0":
        return 0.0
    if not text or _PART.sub("", text):
        raise ValueError(f"not a Go duration such as 250ms, 3s or 1m30s: {text!r}")
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(text))


def claim_faults(annotations: Mapping[str, str] | None) -> ClaimFaults:
    """The faults a claim's annotations ask for; ClaimFaultError names the first bad one and its value."""
    a = annotations or {}
    return ClaimFaults(
        prepare_error=_message(a, PREPARE_ERROR),
        prepare_fail_count=_fail_count(a.get(PREPARE_FAIL_COUNT)),
        prepare_delay_s=_delay(a.get(PREPARE_DELAY)),
        unprepare_error=_message(a, UNPREPARE_ERROR),
    )


def _message(annotations: Mapping[str, str], key: str) -> str:
    value = annotations.get(key)
    if value is None:
        return ""
    if not value.strip():
        raise ClaimFaultError(f"annotation {key}: {value!r}: the message must not be empty")
    if len(value) > MAX_MESSAGE:
        raise ClaimFaultError(f"annotation {key}: message of {len(value)} characters, at most {MAX_MESSAGE}")
    return value


def _fail_count(value: str | None) -> int:
    if value is None:
        return 0
    if not value.isascii() or not value.isdigit() or int(value) > MAX_FAIL_COUNT:
        raise ClaimFaultError(
            f"annotation {PREPARE_FAIL_COUNT}: {value!r}: expected a whole number from 0 to {MAX_FAIL_COUNT}"
        )
    return int(value)


def _delay(value: str | None) -> float:
    if value is None:
        return 0.0
    try:
        seconds = parse_duration(value)
    except ValueError as e:
        raise ClaimFaultError(f"annotation {PREPARE_DELAY}: {e}") from e
    if seconds > MAX_DELAY_S:
        raise ClaimFaultError(f"annotation {PREPARE_DELAY}: {value!r}: at most 10m")
    return seconds
