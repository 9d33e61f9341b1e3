"""compute-domain.nvidia.com's retry within a Prepare call (`cmd/compute-domain-kubelet-plugin/driver.go`
PrepareResourceClaims, `pkg/workqueue` DefaultPrepUnprepRateLimiter): each claim, as the runtime read it
once (runtime.claims), is tried until it is done or ErrorRetryMaxTimeout (45 s) has passed, a retryable
failure again after its own backoff of 250 ms doubling to 3 s; a success or a permanent failure is done at
once. So a channel claim of a node whose daemon turns Ready a second later is prepared in that call, not on
the kubelet's next pod sync.

[differs] A claim still failing at the deadline: upstream leaves it out of its answer (the kubelet then
reports `NodePrepareResources skipped 1 ResourceClaims`); we answer with its last error. [U] The workqueue's
global bucket (5 retries/s, burst 10) is not emulated.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from fakeplugin.model import PrepareResult
from fakeplugin.runtime.driver import Claim
from fakeplugin.runtime.retry import Backoff

TIMEOUT_SECONDS = 45.0  # ErrorRetryMaxTimeout
FIRST_DELAY, MAX_DELAY = 0.25, 3.0  # the per-claim exponential failure rate limiter


def prepare_retrying(
    prepare: Callable[[Sequence[Claim]], dict[str, PrepareResult]],
    claims: Sequence[Claim],
    *,
    timeout: float = TIMEOUT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, PrepareResult]:
    """`prepare(claims)`, the claims with retryable failures again until done or `timeout` has passed."""
    deadline = clock() + timeout
    results: dict[str, PrepareResult] = {}
    due = {c.ref.uid: clock() for c in claims}  # claim → when it is tried next
    backoff = {c.ref.uid: Backoff(FIRST_DELAY, MAX_DELAY) for c in claims}
    pending = list(claims)
    while pending:
        now = clock()
        batch = [c for c in pending if due[c.ref.uid] <= now]
        answers = prepare(batch) if batch else {}
        for c in batch:
            uid = c.ref.uid
            result = results[uid] = answers[uid]
            wait = backoff[uid].failed() if result.error and result.retryable else None
            if wait is not None and now + wait < deadline:
                due[uid] = now + wait
            else:
                pending.remove(c)
        if pending:
            sleep(max(0.0, min(due[c.ref.uid] for c in pending) - clock()))
    return results
