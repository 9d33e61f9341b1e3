"""The ComputeDomain side of Prepare: the few API calls NVIDIA's ComputeDomainManager makes, and its rules
(`cmd/compute-domain-kubelet-plugin/computedomain.go`).

- the ComputeDomain by UID (upstream: an informer over every namespace, indexed by UID; here
  client.DomainCache, the same informer, whose miss lists once, so a just-created domain is seen at once);
- the node label `resource.nvidia.com/computeDomain=<cdUID>`: added by a channel Prepare (another
  domain's label is an error), removed by its Unprepare only when it names that domain;
- readiness: with the ComputeDomainCliques gate, this node's entry in the ComputeDomainClique
  `<cdUID>.<cliqueID>` of the driver namespace (Ready), else the domain's `status.nodes` entry.

Error texts are upstream's. Node updates are merge patches carrying the resourceVersion read (upstream:
GET + Update), so a concurrent change fails the attempt instead of being overwritten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from fakeplugin.apis.computedomain import COMPUTE_DOMAIN_LABEL, STATUS_READY, clique_name

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class DomainError(Exception):
    """A ComputeDomain step failed; the message is upstream's chain from the step on."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class DomainApi(Protocol):
    """What the driver asks the API server (client.DomainClient implements it over fakeplugin.kube.Kube)."""

    def compute_domain(self, uid: str) -> Obj | None:
        """The ComputeDomain with this UID, in any namespace; None when there is none."""
        ...

    def compute_domain_clique(self, namespace: str, name: str) -> Obj:
        """The ComputeDomainClique; raises (ApiException) when it cannot be read, e.g. absent."""
        ...

    def get_node(self, name: str) -> Obj: ...

    def patch_node_labels(self, name: str, labels: Mapping[str, str | None], *, resource_version: str) -> Obj:
        """Merge-patch the node's labels (None removes one), only if it is still at `resource_version`."""
        ...


@runtime_checkable
class Running(Protocol):
    """Optional for a DomainApi: what runs while the plugin does (client.DomainClient: its informer, one per
    driver). A stand-in without it (the unit tests' dicts) has nothing to start."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def node_ready(node_name: str, domain: Mapping[str, Any], clique: Mapping[str, Any] | None) -> bool:
    """isCurrentNodeReady: Ready in the clique's daemons, else in the domain's status.nodes (pure)."""
    for daemon in (clique or {}).get("daemons") or []:
        if daemon.get("nodeName") == node_name:
            if daemon.get("status") == STATUS_READY:
                return True
            break
    for node in (domain.get("status") or {}).get("nodes") or []:
        if node.get("name") == node_name:
            return node.get("status") == STATUS_READY
    return False


class DomainManager:
    """ComputeDomainManager of one node: `clique_id()` is the node's now (`<clusterUUID>.<clique>` or "";
    the inventory may change it, as NVML's fabric info may under the real plugin)."""

    def __init__(
        self,
        api: DomainApi,
        *,
        node_name: str,
        namespace: str,
        clique_id: Callable[[], str],
        cliques_gate: bool,
    ) -> None:
        self._api = api
        self.node_name = node_name
        self._namespace = namespace  # the driver's: where the controller keeps the cliques
        self.clique_id = clique_id
        self._cliques = cliques_gate

    def domain(self, uid: str, what: str = "error getting ComputeDomain") -> Obj:
        try:
            domain = self._api.compute_domain(uid)
        except Exception as e:  # whatever the API client raises
            raise DomainError(f"{what}: {e}") from e
        if domain is None:
            raise DomainError(f"ComputeDomain not found: {uid}")
        return domain

    def assert_namespace(self, claim_namespace: str, uid: str) -> None:
        where = "error asserting ComputeDomain's namespace"
        try:
            domain = self.domain(uid)
        except DomainError as e:
            raise DomainError(f"{where}: {e}", permanent=True) from e
        if domain["metadata"].get("namespace") != claim_namespace:
            raise DomainError(
                f"{where}: the ResourceClaim's namespace is different than the ComputeDomain's namespace",
                permanent=True,
            )

    def add_node_label(self, uid: str) -> None:
        where = "error adding Node label for ComputeDomain"
        node = self._node(where)
        current = (node["metadata"].get("labels") or {}).get(COMPUTE_DOMAIN_LABEL)
        if current is not None and current != uid:
            raise DomainError(f"{where}: label already exists for a different ComputeDomain")
        if current == uid:
            return
        self._patch(node, uid, f"{where}: error updating Node with label")
        log.info("node %s: labelled %s=%s", self.node_name, COMPUTE_DOMAIN_LABEL, uid)

    def remove_node_label(self, uid: str) -> None:
        """Only a label naming this domain goes; absent or another's is success."""
        where = "error removing Node label for ComputeDomain"
        node = self._node(where)
        if (node["metadata"].get("labels") or {}).get(COMPUTE_DOMAIN_LABEL) != uid:
            return
        self._patch(node, None, f"{where}: error updating Node to remove label")
        log.info("node %s: removed label %s=%s", self.node_name, COMPUTE_DOMAIN_LABEL, uid)

    def assert_ready(self, uid: str) -> None:
        where = "error asserting ComputeDomain Ready"
        try:
            domain = self.domain(uid)
        except DomainError as e:
            raise DomainError(f"{where}: {e}") from e
        clique = self._clique(uid) if self._cliques else None
        if not node_ready(self.node_name, domain, clique):
            raise DomainError(f"{where}: current node not ready in ComputeDomain")

    def _clique(self, uid: str) -> Obj | None:
        name = clique_name(uid, self.clique_id())
        try:
            return self._api.compute_domain_clique(self._namespace, name)
        except Exception as e:  # upstream logs it and falls back to the domain's status
            log.error("error getting ComputeDomainClique %s: %s", name, e)
            return None

    def _node(self, where: str) -> Obj:
        try:
            return self._api.get_node(self.node_name)
        except Exception as e:
            raise DomainError(f"{where}: error retrieving Node: {e}") from e

    def _patch(self, node: Obj, value: str | None, where: str) -> None:
        try:
            self._api.patch_node_labels(
                self.node_name,
                {COMPUTE_DOMAIN_LABEL: value},
                resource_version=node["metadata"].get("resourceVersion", ""),
            )
        except Exception as e:
            raise DomainError(f"{where}: {e}") from e
