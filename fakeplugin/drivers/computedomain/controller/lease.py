"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it for NVIDIA's
controller (cmd/compute-domain-controller/main.go `runWithLeaderElection`, release v0.4.1 and later;
pkg/flags/leaderelection.go for the durations): acquire when the Lease is free or its holder's renewal is
older than the lease duration (by our clock, from when we last saw it change), renew every retry period,
lose leadership when no renewal succeeded within the renew deadline, release the Lease on stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from fakeplugin.kube import Kube, describe_api_error

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"


def micro_time(at: float) -> str:
    """metav1.MicroTime as the API server writes it."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def held_by_other(spec: Obj, identity: str, observed_at: float, now: float) -> bool:
    """Another candidate holds the Lease and renewed it (as we observed) within its lease duration."""
    holder = spec.get("holderIdentity") or ""
    duration = float(spec.get("leaseDurationSeconds") or 0)
    return bool(holder) and holder != identity and observed_at + duration > now


def claimed(spec: Obj, config: LeaseConfig, now: float) -> Obj:
    """The Lease spec with us as holder: renewing keeps acquireTime and the transitions; taking over
    starts a new term."""
    ours = spec.get("holderIdentity") == config.identity
    stamp = micro_time(now)
    return {
        "holderIdentity": config.identity,
        "leaseDurationSeconds": int(config.lease_duration),
        "acquireTime": spec.get("acquireTime", stamp) if ours else stamp,
        "renewTime": stamp,
        "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if ours or not spec else 1),
    }


def released(spec: Obj, now: float) -> Obj:
    """What client-go writes on release: no holder, a 1 s lease."""
    stamp = micro_time(now)
    return {
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": int(spec.get("leaseTransitions") or 0),
    }


class LeaderElector:
    """Run `lead(stop)` while we hold the Lease; return when `stop` is set or leadership was lost."""

    def __init__(self, kube: Kube, config: LeaseConfig, clock: Callable[[], float] = time.time) -> None:
        self._kube, self._config, self._clock = kube, config, clock
        self._seen: tuple[str, str] = ("", "")  # the holder and renewTime last observed
        self._seen_at = 0.0

    def run(self, lead: Callable[[threading.Event], None], stop: threading.Event) -> None:
        cfg = self._config
        while not stop.is_set() and not self._try():
            stop.wait(cfg.retry_period)
        if stop.is_set():
            return
        log.info(
            "became leader of Lease %s/%s as %s, starting controller", cfg.namespace, cfg.name, cfg.identity
        )
        leading = threading.Event()
        worker = threading.Thread(target=lead, args=(leading,), name="cd-controller", daemon=True)
        worker.start()
        last_renewal = time.monotonic()
        while not stop.is_set() and worker.is_alive():
            stop.wait(cfg.retry_period)
            if self._try():
                last_renewal = time.monotonic()
            elif time.monotonic() - last_renewal > cfg.renew_deadline:
                log.warning("stopped leading, lockID: %s", cfg.identity)
                break
        leading.set()
        worker.join()
        self._release()

    def _try(self) -> bool:
        """Acquire or renew once; whether we hold the Lease now."""
        cfg, now = self._config, self._clock()
        try:
            lease = self._kube.get(cfg.path)
        except ApiException as exc:
            if exc.status != 404:
                log.warning(
                    "getting Lease %s/%s failed: %s", cfg.namespace, cfg.name, describe_api_error(exc)
                )
                return False
            return self._write("create", {"metadata": {"name": cfg.name, "namespace": cfg.namespace}}, now)
        spec = lease.get("spec") or {}
        seen = (spec.get("holderIdentity") or "", spec.get("renewTime") or "")
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        if held_by_other(spec, cfg.identity, self._seen_at, now):
            return False
        return self._write("replace", lease, now)

    def _write(self, how: str, lease: Obj, now: float) -> bool:
        cfg = self._config
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": lease["metadata"],
            "spec": claimed(lease.get("spec") or {}, cfg, now),
        }
        try:
            if how == "create":
                self._kube.create(cfg.path.rsplit("/", 1)[0], body)
            else:
                self._kube.replace(cfg.path, body)
        except ApiException as exc:  # 409: someone else wrote it first
            log.debug("Lease %s: %s", how, describe_api_error(exc))
            return False
        return True

    def _release(self) -> None:
        cfg = self._config
        try:
            lease = self._kube.get(cfg.path)
            if (lease.get("spec") or {}).get("holderIdentity") != cfg.identity:
                return
            lease["spec"] = released(lease["spec"], self._clock())
            self._kube.replace(cfg.path, lease)
        except ApiException as exc:
            log.warning("releasing Lease %s/%s failed: %s", cfg.namespace, cfg.name, describe_api_error(exc))
