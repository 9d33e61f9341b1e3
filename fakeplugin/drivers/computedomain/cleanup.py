"""NVIDIA's checkpoint cleanup (`cmd/compute-domain-kubelet-plugin/cleanup.go`): which PrepareStarted
claims are stale, which PrepareAborted entries have expired. Run once when the plugin opens [U: upstream
also runs it every 10 minutes]."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from fakeplugin.drivers.computedomain import checkpoint as cp
from fakeplugin.model import ClaimRef, ClaimState
from fakeplugin.runtime.driver import GetClaim

log = logging.getLogger(__name__)

ABORTED_TTL_S = 90.0  # PrepareAbortedClaimEntryTTL = 2 * ErrorRetryMaxTimeout (45 s)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"  # metav1.Time in JSON


def stale_claims(checkpoint: cp.ComputeDomainCheckpoint, get_claim: GetClaim) -> list[ClaimRef]:
    """PrepareStarted claims the API server no longer has: not found, or another UID under the name (a GET
    each; other failures are left for a later cleanup)."""
    stale = []
    for uid, entry in checkpoint.claims.items():
        if entry.state is not ClaimState.PREPARE_STARTED:
            continue
        if not entry.name:
            log.debug("Checkpointed RC cleanup: skip checkpointed claim '%s': RC name not in checkpoint", uid)
            continue
        try:
            gone = get_claim(entry.namespace, entry.name)["metadata"]["uid"] != uid
        except Exception as e:  # whatever the client raises; 404 means gone
            if getattr(e, "status", None) != 404:
                log.info("Checkpointed RC cleanup: skip for checkpointed claim %s: (retry later): %s", uid, e)
                continue
            gone = True
        if gone:
            stale.append(ClaimRef(entry.namespace, uid, entry.name))
    return stale


def expired(entry: cp.Entry, now: float) -> bool:
    """A PrepareAborted entry older than the TTL (or without its time)."""
    if entry.state is not ClaimState.PREPARE_ABORTED:
        return False
    if not entry.aborted_at:
        return True
    aborted = datetime.strptime(entry.aborted_at, TIME_FORMAT).replace(tzinfo=UTC).timestamp()
    return now - aborted >= ABORTED_TTL_S


def aborted_at(now: float) -> str:
    return datetime.fromtimestamp(now, UTC).strftime(TIME_FORMAT)
