"""What a kubelet's DRA manager does on start and every minute, for every node of the fleet: claims its
drivers hold prepared that nothing uses any more are unprepared (docs/local-cluster.md, "What the fleet
does on restart, as a kubelet").

Upstream (kubernetes/kubernetes pkg/kubelet/cm/dra/manager.go, reconcileLoop, read at 001332b0 of
master): every reconcilePeriod, once the pod sources are ready, every pod UID a checkpointed claim
lists that is not among the active pods (GetActivePods: not terminated) has its claims unprepared,
unless another pod still uses them. The fleet keeps no claim→pod record of its own: the drivers'
checkpoints are the record, and a claim is in use while an active pod of its node names it. A claim
whose ResourceClaim is gone (its UID not among the cluster's claims) is unprepared even while its pod
lingers: its devices may be allocated again. Container records of pods the node no longer has are
removed; so are the files of a simulated node whose Node object is gone.

Invariant (no claim in use is unprepared): per pass, the checkpoints and record dirs are read first, then
the pods, then the claims: a claim prepared for a pod was read by that pod's worker after the pod was
known, and a claim in a checkpoint existed before the claims were listed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass

from fakeplugin.fleet import podclaims, stages
from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.dirs import FleetDirs
from fakeplugin.fleet.records import record_name
from fakeplugin.model import ClaimRef
from fakeplugin.runtime.driver import NodePlugin

log = logging.getLogger(__name__)

# The kubelet's reconcilePeriod (defaultReconcilePeriod in earlier versions of manager.go).
RECONCILE_SECONDS = 60.0
_TERMINATED = ("Succeeded", "Failed")


def active(pod: Obj) -> bool:
    """Whether the pod may still use its claims: not deleted, not terminated, not already unprepared."""
    meta = pod["metadata"]
    done = meta.get("deletionTimestamp") and (meta.get("annotations") or {}).get(stages.UNPREPARED) == "true"
    return not (pod.get("gone") or done or (pod.get("status") or {}).get("phase") in _TERMINATED)


def claims_in_use(pods: Iterable[Obj]) -> set[tuple[str, str]]:
    """(namespace, ResourceClaim name) of every claim an active pod of `pods` uses."""
    return {
        (p["metadata"]["namespace"], name)
        for p in pods
        if active(p)
        for name in podclaims.pod_claims(p).names.values()
    }


def stale_claims(prepared: Iterable[ClaimRef], pods: Iterable[Obj], claim_uids: Set[str]) -> list[ClaimRef]:
    """The prepared claims of a node to unprepare: no active pod of `pods` (the node's) uses it, or its
    ResourceClaim is gone (`claim_uids`: the UIDs of every claim of the cluster)."""
    in_use = claims_in_use(pods)
    return [r for r in prepared if (r.namespace, r.name) not in in_use or r.uid not in claim_uids]


def stale_records(names: Iterable[str], pods: Iterable[Obj]) -> list[str]:
    """The container record file names (records.record_name) of pods not among `pods`."""
    kept = {
        record_name(p["metadata"]["namespace"], p["metadata"]["name"], c["name"])
        for p in pods
        if not p.get("gone")
        for c in p["spec"].get("containers") or []
    }
    return sorted(n for n in names if n.endswith(".json") and n not in kept)


@dataclass
class Pass:
    """What one reconcile pass did."""

    unprepared: int = 0
    records: int = 0
    nodes: int = 0
    failures: int = 0


class Reconciler:
    """`served()`: the nodes the fleet serves now; `plugins(node)`: driver name → its plugin there;
    `pods_on(node)`: the pods with claims bound there, as the pod watch knows them; `forget(node)`: drop
    the plugins of a node no longer served; `owns(node)`: whether the node is of this fleet's shard
    (fleet.shard; several fleets may share one nodes dir). `dirs`: fleet.dirs.FleetDirs."""

    def __init__(
        self,
        kube: FleetKube,
        *,
        served: Callable[[], Set[str]],
        plugins: Callable[[str], Mapping[str, NodePlugin]],
        pods_on: Callable[[str], list[Obj]],
        forget: Callable[[str], None],
        owns: Callable[[str], bool],
        dirs: FleetDirs,
    ) -> None:
        self._kube = kube
        self._served = served
        self._plugins = plugins
        self._pods_on = pods_on
        self._forget = forget
        self._owns = owns
        self._dirs = dirs

    def run(self, stop: threading.Event, wake: threading.Event, period: float = RECONCILE_SECONDS) -> None:
        """Until `stop`: a pass now, then whenever `wake` is set (the pods were listed again) or `period`
        passed."""
        while not stop.is_set():
            wake.clear()
            try:
                done = self.once()
            except Exception as exc:  # the API server unreachable, say: the next pass retries
                log.warning("reconcile failed, next pass in %.0f s: %s", period, exc)
            else:
                if done.unprepared or done.records or done.nodes or done.failures:
                    log.info("reconciled: %s", done)
            wake.wait(period)

    def once(self) -> Pass:
        done = Pass(nodes=self._drop_gone_nodes())
        served = sorted(self._served())
        prepared: dict[tuple[str, str], tuple[NodePlugin, list[ClaimRef]]] = {}
        records: dict[str, list[str]] = {}
        for node in served:
            for driver, plugin in self._plugins(node).items():
                if not self._dirs.plugin(node, driver).is_dir():
                    continue  # this driver never prepared anything on the node
                try:
                    if claims := plugin.prepared_claims():
                        prepared[(node, driver)] = (plugin, claims)
                except Exception as exc:  # a corrupt checkpoint, a held lock: this node only
                    log.warning("node %s, %s: cannot read the prepared claims: %s", node, driver, exc)
                    done.failures += 1
            with contextlib.suppress(FileNotFoundError):  # no pod ever ran there
                records[node] = os.listdir(self._dirs.containers(node))
        pods = {node: self._pods_on(node) for node in served}
        claim_uids = self._kube.claim_uids() if prepared else set()
        for (node, _), (plugin, claims) in prepared.items():
            # Asked again with the pods of now: a pod seen since may use one (the kubelet, too, checks a
            # claim's pods again under its cache lock just before it unprepares).
            stale = stale_claims(
                stale_claims(claims, pods[node], claim_uids), self._pods_on(node), claim_uids
            )
            if not stale:
                continue
            errors = [e for e in plugin.unprepare(stale).values() if e]
            done.unprepared += len(stale) - len(errors)
            done.failures += len(errors)
            for error in errors:
                log.warning("node %s: reconcile: %s", node, error)
        for node, names in records.items():
            for name in stale_records(names, pods[node]):
                (self._dirs.containers(node) / name).unlink(missing_ok=True)
                done.records += 1
        return done

    def _drop_gone_nodes(self) -> int:
        """Remove the files of simulated nodes of this shard whose Node is gone; only directories with the
        fleet's plugins/ (a local cluster's kubelet nodes keep theirs in the same directory, without).
        Invariant: a node's files go only once its Node object is deleted, never because another fleet (a
        shard, or one of another kwok's selector) serves it from the same nodes dir."""
        try:
            entries = list(os.scandir(self._dirs.root))
        except FileNotFoundError:
            return 0
        served = self._served()
        unserved = [
            e.name
            for e in entries
            if e.name not in served and self._owns(e.name) and os.path.isdir(os.path.join(e.path, "plugins"))
        ]
        gone = sorted(set(unserved) - self._kube.node_names()) if unserved else []
        for name in gone:
            self._forget(name)
            shutil.rmtree(self._dirs.node(name), ignore_errors=True)
            log.info("node %s is gone: its checkpoints, CDI specs and records are removed", name)
        return len(gone)
