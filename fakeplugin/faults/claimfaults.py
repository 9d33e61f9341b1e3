"""Faults on demand for one claim: its `fakeplugin.dev/*` annotations, parsed, checked and injected.

A ResourceClaim (or a ResourceClaimTemplate's `spec.metadata`, which the resourceclaim controller copies
into every claim it makes from the template: pkg/controller/resourceclaim/controller.go,
`handleClaim`, `Annotations: template.Spec.ObjectMeta.Annotations`) may carry:

    fakeplugin.dev/prepare-error: "<message>"     every Prepare of the claim fails with this message
    fakeplugin.dev/prepare-fail-count: "N"        the first N Prepare attempts fail, later ones succeed
    fakeplugin.dev/prepare-delay: "<duration>"    Prepare waits this long first (Go duration, ≤ 10m)
    fakeplugin.dev/unprepare-error: "<message>"   every Unprepare of the claim fails with this message

A bad value is a `ClaimFaultError` naming the annotation and the value; the Preparer fails that claim
with it (never the call, never the plugin).

`Injector` is what the Preparer asks, in the caller's thread and outside the node lock: Prepare passes the
claim it already read. Unprepare reads the claim again (one GET) only when unprepare-error can apply:

    the Node carries fakeplugin.dev/unprepare-faults (any non-empty value): every Unprepare reads its claim,
        so an unprepare-error added while the pod runs is seen when it stops;
    else only claims this process did not see without unprepare-error at their last Prepare: claims that
        carried it then (removing it heals them, as before), that failed to parse, and claims prepared
        before a plugin restart (`QuietClaims` is in memory) or forgotten past MAX_COUNTED.

Most claims carry no fault: their Unprepare makes no API call at all.

`FailCounts` keeps the attempts prepare-fail-count counts: in the plugin's memory, per claim UID (UIDs are
never reused, so a new claim from a template starts at 0), for the plugin's lifetime, the most recently
failed MAX_COUNTED claims at most. A plugin restart forgets them: the claim then fails N more times, as if
it had just been annotated.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin.model import ClaimRef

log = logging.getLogger(__name__)

PREFIX = "fakeplugin.dev/"
PREPARE_ERROR = PREFIX + "prepare-error"
PREPARE_FAIL_COUNT = PREFIX + "prepare-fail-count"
PREPARE_DELAY = PREFIX + "prepare-delay"
UNPREPARE_ERROR = PREFIX + "unprepare-error"
CLAIM_ANNOTATIONS = (PREPARE_ERROR, PREPARE_FAIL_COUNT, PREPARE_DELAY, UNPREPARE_ERROR)
# On a Node: read every claim's unprepare-error at its Unprepare, not only those that had it at Prepare.
UNPREPARE_FAULTS = PREFIX + "unprepare-faults"

# 10m: longer only holds one of the plugin's worker threads for nothing. Past 45 s the kubelet's call
# times out (pkg/kubelet/cm/dra/plugin/dra_plugin.go defaultClientCallTimeout) and it retries later.
MAX_DELAY_S = 600.0
MAX_FAIL_COUNT = 1000  # at the kubelet's ~10 s retry backoff, close to three hours of failures
MAX_COUNTED = 10_000  # claims remembered (failed attempts; quiet claims); the oldest is forgotten first
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


class FailCounts:
    """Prepare attempts of claims with prepare-fail-count, per claim UID; safe across threads."""

    def __init__(self, max_claims: int = MAX_COUNTED) -> None:
        self._max = max_claims
        self._lock = threading.Lock()
        self._attempts: OrderedDict[str, int] = OrderedDict()

    def attempt(self, uid: str, fail_count: int) -> int:
        """Count an attempt; its number (1 for the first) when it is to fail, else 0. Attempts that
        succeed are not counted, so lowering N later never makes an earlier success a failure."""
        with self._lock:
            done = self._attempts.get(uid, 0)
            if done >= fail_count:
                return 0
            self._attempts[uid] = done + 1
            self._attempts.move_to_end(uid)
            while len(self._attempts) > self._max:
                self._attempts.popitem(last=False)
            return done + 1


class QuietClaims:
    """UIDs of claims whose last Prepare in this process read no unprepare-error; safe across threads.

    Bounded (the oldest forgotten first): forgetting a claim only costs its Unprepare a GET."""

    def __init__(self, max_claims: int = MAX_COUNTED) -> None:
        self._max = max_claims
        self._lock = threading.Lock()
        self._uids: OrderedDict[str, None] = OrderedDict()

    def mark(self, uid: str, quiet: bool) -> None:
        with self._lock:
            if not quiet:
                self._uids.pop(uid, None)
                return
            self._uids[uid] = None
            self._uids.move_to_end(uid)
            while len(self._uids) > self._max:
                self._uids.popitem(last=False)

    def take(self, uid: str) -> bool:
        """Whether `uid` was quiet; forgotten either way (its Unprepare is under way)."""
        with self._lock:
            return self._uids.pop(uid, False) is None


def never() -> bool:
    """A node that never asks for every Unprepare's claim to be read."""
    return False


class Injector:
    """The faults a claim's annotations inject into its Prepare and Unprepare; safe across threads.

    `get_claim(namespace, name)` reads a claim (for Unprepare); `sleep` waits prepare-delay;
    `read_unprepare_faults()`: whether the node asks for every Unprepare's claim to be read (its
    UNPREPARE_FAULTS annotation, asked at each Unprepare)."""

    def __init__(
        self,
        get_claim: Callable[[str, str], Mapping[str, Any]],
        sleep: Callable[[float], None],
        read_unprepare_faults: Callable[[], bool] = never,
    ) -> None:
        self._get_claim = get_claim
        self._sleep = sleep
        self._read_unprepare_faults = read_unprepare_faults
        self._fail_counts = FailCounts()
        self._quiet = QuietClaims()

    def prepare_failure(self, ref: ClaimRef, claim: Mapping[str, Any]) -> str:
        """Wait the claim's prepare-delay; then why this attempt fails, or "" (no fault, or none now)."""
        try:
            wanted = claim_faults((claim.get("metadata") or {}).get("annotations"))
        except ClaimFaultError as e:
            self._quiet.mark(ref.uid, False)
            return str(e)
        self._quiet.mark(ref.uid, not wanted.unprepare_error)
        if wanted.prepare_delay_s:
            log.info("prepare %s: %s: waiting %gs", ref, PREPARE_DELAY, wanted.prepare_delay_s)
            self._sleep(wanted.prepare_delay_s)  # this claim's caller only: never under the node lock
        if wanted.prepare_fail_count:  # the first N attempts fail, with prepare-error's message if set
            attempt = self._fail_counts.attempt(ref.uid, wanted.prepare_fail_count)
            if not attempt:
                return ""
            return wanted.prepare_error or (
                f"{PREPARE_FAIL_COUNT}: attempt {attempt} of {wanted.prepare_fail_count} fails"
            )
        return wanted.prepare_error

    def unprepare_failure(self, ref: ClaimRef) -> str:
        """The claim's unprepare-error, or "". No GET for a quiet claim unless the node asks for it. A claim
        that cannot be read (gone: the usual case once its pod is deleted; or the API server unreachable)
        has no fault: Unprepare never depends on the API."""
        if self._quiet.take(ref.uid) and not self._read_unprepare_faults():
            return ""
        try:
            claim = self._get_claim(ref.namespace, ref.name)
        except Exception as e:  # whatever the API client raises
            level = logging.DEBUG if getattr(e, "status", None) == 404 else logging.WARNING
            log.log(level, "unprepare %s: claim not readable (%s): no injected fault", ref, e)
            return ""
        meta = claim.get("metadata") or {}
        if meta.get("uid", ref.uid) != ref.uid:
            return ""  # a new claim of the same name, not the one being unprepared
        try:
            return claim_faults(meta.get("annotations")).unprepare_error
        except ClaimFaultError as e:
            return str(e)
