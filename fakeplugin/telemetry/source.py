"""A host's telemetry: its nodes read at one moment each, who uses their devices, the energy counters.

`Telemetry.render()` is what one scrape of `/metrics` shows: for each node the host serves (by name), its
devices and faults from one NodeDevices state (`device_state`: the XID values agree with the taints of that
state), the uses and loads the node's attribution gives (serve: the kubelet's PodResources `List`, the load
annotations read from the API server; fleet: derived from the pods the fleet watches and a ResourceClaim
watch), then samples.node_series and exposition.blocks.

Energy (`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ) is integrated here, render by render: the power of the
last render times the time since. It starts at 0 when the host starts (the real counter starts when the
driver loads); an entity gone from a render is forgotten (bounded memory).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import quote

from fakeplugin.kube import Kube
from fakeplugin.runtime.driver import DeviceStates
from fakeplugin.runtime.informer import Source, list_and_watch
from fakeplugin.telemetry import exposition, samples, uses
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.counters import Counter
from fakeplugin.telemetry.exporters import ExporterRelease
from fakeplugin.telemetry.load import ANNOTATION, Load, LoadError
from fakeplugin.telemetry.podresources import PodResources
from fakeplugin.telemetry.samples import NodeState

log = logging.getLogger(__name__)

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
MAX_REPORTED = 256  # distinct bad-annotation messages remembered (each logged once)


# What telemetry reads of a node: the contract's optional capability, which the GPU driver's nodes have.
NodeView = DeviceStates


class Attribution(Protocol):
    def read(self, node: str) -> tuple[list[Use], dict[str, Load]]:
        """The node's uses (PodResources List order) and its devices' loads by name."""
        ...


class Reported:
    """Each distinct problem logged once (a scrape every few seconds must not repeat it forever)."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, exc: LoadError) -> None:
        text = str(exc)
        with self._lock:
            if text in self._seen:
                return
            if len(self._seen) >= MAX_REPORTED:
                self._seen.clear()
            self._seen.add(text)
        log.error("%s; its devices stay idle", text)


class KubeletAttribution:
    """serve: the kubelet's PodResources `List`, each claim and pod of it read for its load annotation."""

    def __init__(self, podresources: PodResources, get: Callable[[str], dict[str, Any]]) -> None:
        self._podresources = podresources
        self._get = get  # an API GET by path (kube.Kube.get)
        self._reported = Reported()

    def read(self, node: str) -> tuple[list[Use], dict[str, Load]]:
        listed = self._podresources.uses()
        claims = {
            key: obj
            for key in {(u.claim_namespace, u.claim_name) for u in listed}
            if (obj := self._fetch("resource.k8s.io/v1", "resourceclaims", *key)) is not None
        }
        pods = {
            key: obj
            for key in {(u.namespace, u.pod) for u in listed}
            if (obj := self._fetch("v1", "pods", *key)) is not None
        }
        found = [replace(u, pod_uid=uses.pod_uid(pods.get((u.namespace, u.pod)))) for u in listed]
        return found, uses.device_loads(found, claims, pods, self._reported)

    def _fetch(self, version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        prefix = "/api/v1" if version == "v1" else f"/apis/{version}"
        try:
            return self._get(
                f"{prefix}/namespaces/{quote(namespace, safe='')}/{plural}/{quote(name, safe='')}"
            )
        except Exception as exc:  # gone meanwhile, or the API server is away: that object's load is idle
            log.debug("telemetry: %s %s/%s: %s", plural, namespace, name, exc)
            return None


def slim_claim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What telemetry keeps of a ResourceClaim: its name, its load annotation, its allocated devices."""
    meta = obj["metadata"]
    annotations = meta.get("annotations") or {}
    allocation = (obj.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {
        "metadata": {
            "namespace": meta["namespace"],
            "name": meta["name"],
            "annotations": {ANNOTATION: annotations[ANNOTATION]} if ANNOTATION in annotations else {},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [{k: r[k] for k in ("driver", "pool", "device") if k in r} for r in results]
                }
            }
        },
    }


class ClaimWatch:
    """Every ResourceClaim of the cluster, slim (`slim_claim`), from one list + watch."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def run(self, kube: Kube, stop: threading.Event) -> None:
        list_and_watch(
            kube, Source(CLAIMS), stop=stop, on_list=self._listed, on_event=self._event, synced=self.synced
        )

    def _listed(self, items: list[dict[str, Any]]) -> None:
        claims = {(o["metadata"]["namespace"], o["metadata"]["name"]): slim_claim(o) for o in items}
        with self._lock:
            self._claims = claims

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self._lock:
            if kind == "DELETED":
                self._claims.pop(key, None)
            else:
                self._claims[key] = slim_claim(obj)

    def snapshot(self) -> dict[tuple[str, str], dict[str, Any]]:
        with self._lock:
            return dict(self._claims)


class FleetAttribution:
    """fleet: uses derived from the pods the fleet's kubelet knows on a node and the claims they use."""

    def __init__(self, pods_on: Callable[[str], list[dict[str, Any]]], claims: ClaimWatch) -> None:
        self._pods_on = pods_on
        self._claims = claims
        self._reported = Reported()

    def read(self, node: str) -> tuple[list[Use], dict[str, Load]]:
        pods = self._pods_on(node)
        claims = self._claims.snapshot()
        found = uses.node_uses(pods, claims)
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods if uses.active(p)}
        return found, uses.device_loads(found, claims, by_name, self._reported)


@dataclass
class _Energy:
    total_mj: float
    watts: float
    at: float


class Telemetry:
    """`nodes()`: the GPU plugins of the nodes the host serves now; `attribution`: their uses and loads."""

    def __init__(
        self,
        nodes: Callable[[], Sequence[NodeView]],
        attribution: Attribution,
        counters: Sequence[Counter],
        *,
        release: ExporterRelease = samples.DEFAULT_EXPORTER,
        pod_uid: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nodes = nodes
        self._attribution = attribution
        self._counters = list(counters)
        self._release = release
        self._pod_uid = pod_uid  # the exporter's --kubernetes-enable-pod-uid
        self._clock = clock
        self._energy: dict[str, _Energy] = {}
        self._lock = threading.Lock()  # one render at a time: the energy table is its state

    def render(self) -> Iterator[bytes]:
        """One scrape's exposition, block by block (exposition.blocks)."""
        with self._lock:
            series: samples.Series = {}
            energy: dict[str, _Energy] = {}
            now = self._clock()
            for view in sorted(self._nodes(), key=lambda v: v.node_name):
                devices, faults = view.device_state()
                found, loads = self._attribution.read(view.node_name)
                listed = list(devices.values())
                mj = self._integrate(samples.entity_powers(listed, loads), now, energy)
                state = NodeState(view.node_name, listed, faults, found, loads, mj)
                samples.node_series(
                    state, self._counters, series, release=self._release, pod_uid=self._pod_uid
                )
            self._energy = energy  # entities not rendered now are dropped
            # made outside the lock: `series` is this render's
            return exposition.blocks(series, by_name=self._release.expfmt)

    def _integrate(self, powers: dict[str, float], now: float, into: dict[str, _Energy]) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, watts in powers.items():
            before = self._energy.get(key)
            total = 0.0 if before is None else before.total_mj + before.watts * (now - before.at) * 1000
            into[key] = _Energy(total, watts, now)
            out[key] = int(total)
        return out
