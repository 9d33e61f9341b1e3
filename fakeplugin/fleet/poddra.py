"""What a kubelet's DRA manager does for one pod (kubernetes/kubernetes v1.35 pkg/kubelet/cm/dra/manager.go
PrepareResources, UnprepareResources), against the drivers on
the pod's node (runtime.driver.NodePlugin, by driver name):
read and check the pod's claims, prepare each driver's claims with that driver (the drivers of a claim are
those of its allocation's results), record what each container would get, tell kwok (fleet.stages) by
annotating the pod; and the reverse when the pod goes.

Invariant: a pod is annotated PREPARED only once every claim's CDI spec is on disk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from pathlib import Path

from kubernetes.client.exceptions import ApiException

from fakeplugin.fleet import podclaims, stages
from fakeplugin.fleet.api import FleetKube, Obj
from fakeplugin.fleet.records import record_name, write_record
from fakeplugin.kube import describe_api_error
from fakeplugin.model import ClaimRef, PreparedDevice, PrepareResult
from fakeplugin.runtime import claims as runtime_claims
from fakeplugin.runtime.driver import NodePlugin

log = logging.getLogger(__name__)


class PodDRA:
    """`plugins(node)`: driver name → that driver on the node (empty: not a node of the fleet);
    `containers_dir(node)`, `cdi_root(node)`: where the node keeps container records and CDI specs."""

    def __init__(
        self,
        kube: FleetKube,
        *,
        plugins: Callable[[str], Mapping[str, NodePlugin]],
        containers_dir: Callable[[str], Path],
        cdi_root: Callable[[str], Path],
    ) -> None:
        self._kube = kube
        self.plugins = plugins
        self._containers_dir = containers_dir
        self._cdi_root = cdi_root

    def prepare(self, obj: Obj) -> bool:
        """Prepare the pod's claims on its node; False: failed (event sent), try again later."""
        meta, node = obj["metadata"], obj["spec"]["nodeName"]
        plugins = self.plugins(node)
        claims = podclaims.pod_claims(obj)
        if claims.pending:
            return True  # the pod's next update (its claim statuses) queues it again
        fetched: dict[tuple[str, str], Obj] = {}
        by_driver: dict[str, list[ClaimRef]] = {}
        for claim_name in dict.fromkeys(claims.names.values()):
            try:
                claim = self._kube.get_claim(meta["namespace"], claim_name)
            except Exception as exc:
                return self._failed(obj, claim_name, f"retrieve claim: {describe_api_error(exc)}")
            reserved = {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}
            if meta["uid"] not in reserved:
                message = (
                    f"pod {meta['namespace']}/{meta['name']} is not allowed to use ResourceClaim {claim_name}"
                )
                return self._failed(obj, claim_name, message, wrapped=False)
            fetched[(meta["namespace"], claim_name)] = claim
            ref = ClaimRef(meta["namespace"], claim["metadata"]["uid"], claim_name)
            for driver in podclaims.claim_drivers(claim):
                if driver not in plugins:
                    message = f"prepare dynamic resources: DRA driver {driver} is not registered"
                    return self._failed(obj, claim_name, message, wrapped=False)
                by_driver.setdefault(driver, []).append(ref)
        devices: dict[str, list[PreparedDevice]] = {name: [] for _, name in fetched}
        for driver, refs in by_driver.items():  # one call per driver, as the kubelet makes
            # The runtime's checks on the claims just read (and checked against the pod): no second GET.
            results = runtime_claims.prepare(
                plugins[driver], refs, lambda namespace, name: fetched[(namespace, name)]
            )
            for ref in refs:
                if results[ref.uid].error:
                    return self._failed(obj, ref.name, results[ref.uid].error)
                devices[ref.name] += results[ref.uid].devices
        by_name = {name: PrepareResult(tuple(d)) for name, d in devices.items()}
        for container in obj["spec"].get("containers") or []:
            ids = podclaims.container_cdi_devices(obj, container, by_name)
            write_record(self._containers_dir(node), obj, container, ids, self._cdi_root(node))
        return self._annotate(obj, stages.PREPARED)

    def unprepare(self, obj: Obj, in_use: Set[str]) -> bool:
        """Unprepare the pod's claims but those in `in_use` (names of claims other pods of the node in its
        namespace still use: upstream keeps a shared claim prepared while any pod of the node uses it).
        The claims are found in the node's checkpoint, so this works after a restart of the fleet too.
        False: failed, try again later. `obj["gone"]`: the pod object is deleted already."""
        meta, node = obj["metadata"], obj["spec"]["nodeName"]
        names = set(podclaims.pod_claims(obj).names.values()) - in_use
        errors: list[str] = []
        for plugin in self.plugins(node).values():
            refs = [
                r for r in plugin.prepared_claims() if r.namespace == meta["namespace"] and r.name in names
            ]
            errors += [e for e in (plugin.unprepare(refs) if refs else {}).values() if e]
        if errors:
            log.warning(
                "pod %s/%s on %s: unprepare failed: %s", meta["namespace"], meta["name"], node, errors[0]
            )
            return False
        for container in obj["spec"].get("containers") or []:
            (
                self._containers_dir(node) / record_name(meta["namespace"], meta["name"], container["name"])
            ).unlink(missing_ok=True)
        return bool(obj.get("gone")) or self._annotate(obj, stages.UNPREPARED)

    def _failed(self, obj: Obj, claim_name: str, error: str, *, wrapped: bool = True) -> bool:
        node = obj["spec"]["nodeName"]
        message = (
            podclaims.prepare_failed_message(claim_name, error)
            if wrapped
            else f"Failed to prepare dynamic resources: {error}"
        )
        log.warning(
            "pod %s/%s on %s: %s", obj["metadata"]["namespace"], obj["metadata"]["name"], node, message
        )
        try:
            self._kube.pod_event(obj, node=node, reason="FailedPrepareDynamicResources", message=message)
        except Exception as exc:  # the event is a report; the retry matters more
            log.warning("event for pod %s: %s", obj["metadata"]["name"], describe_api_error(exc))
        return False

    def _annotate(self, obj: Obj, key: str) -> bool:
        meta = obj["metadata"]
        try:
            self._kube.annotate_pod(meta["namespace"], meta["name"], {key: "true"})
        except ApiException as exc:
            if exc.status == 404:
                return True  # gone meanwhile: its DELETED event unprepares
            log.warning("annotating pod %s/%s: %s", meta["namespace"], meta["name"], describe_api_error(exc))
            return False
        return True
