"""The Node objects of simulated nodes, and a fleet that owns them (`fleet --create-nodes`: the chart's
fleet mode, where no `cluster up` registers them).

Which nodes: every node an inventory entry with `kubelet: false` names (by name, or namePrefix +
replicas) that this fleet's shard owns; selector entries name none. Each Node carries kwok's annotation,
the entry's labels and OWNER_LABEL=<owner>. With an owner object (the chart passes the fleet's
ClusterRole, which exists exactly as long as fleet mode is installed), each also has an ownerReference to
it: when it goes (helm uninstall, or fleet.enabled=false), Kubernetes' garbage collector deletes the
Nodes, and with them their ResourceSlices (owned by their Node), even with no fleet left running.

Invariant: a fleet deletes or relabels only Nodes labelled with its own owner; a Node of one of its
names that it did not make is left alone (logged once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from fakeplugin.drivers.gpu import gpu_node_labels, owned_labels_patch
from fakeplugin.fleet.stages import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from fakeplugin.inventory import Inventory
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.kube import NODES, Kube, Obj

log = logging.getLogger(__name__)

OWNER_LABEL = "fakeplugin.dev/fleet"  # on the Nodes a fleet made: its owner name (the chart: the release)
LABEL_KEYS = "fakeplugin.dev/inventory-labels"  # annotation: the keys of the labels the inventory gave
LOOPBACK = "127.0.0.1"
SYNC_SECONDS = 60.0  # Nodes deleted or relabelled by someone else are put back this often
INVENTORY_POLL_SECONDS = 5.0
CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110"}


def node_addresses(name: str) -> list[dict[str, str]]:
    return [{"type": "InternalIP", "address": LOOPBACK}, {"type": "Hostname", "address": name}]


def simulated_node(
    name: str,
    labels: Mapping[str, str],
    *,
    annotations: Mapping[str, str] | None = None,
    owner_ref: Obj | None = None,
) -> Obj:
    """A Node kwok plays (its annotation kwok.x-k8s.io/node=fake): no kubelet; kwok's node-ready stage
    (fakeplugin.fleet.stages) makes it Ready, keeping this capacity."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
            **labels,
        },
        "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, **(annotations or {})},
    }
    if owner_ref:
        metadata["ownerReferences"] = [owner_ref]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "status": {"capacity": CAPACITY, "allocatable": CAPACITY, "addresses": node_addresses(name)},
    }


def simulated_nodes(
    inventory: Inventory, owns: Callable[[str], bool] = lambda _: True, *, timestamp: int = 0
) -> dict[str, dict[str, str]]:
    """Node name → its labels (the entry's, the clique label of a fabric, the GPU Operator's as labelled at
    `timestamp`), for every `kubelet: false` node the inventory names that `owns` accepts."""
    nodes: dict[str, dict[str, str]] = {}
    for entry in inventory.nodes:
        if entry.kubelet:
            continue
        labels = gpu_node_labels(inventory, entry, timestamp=timestamp)
        for name in entry.node_names():
            if owns(name):
                nodes[name] = labels
    return nodes


def label_patch(meta: Obj, want: Mapping[str, str], owner: str) -> Obj | None:
    """The merge-patch of a Node's metadata (`meta`) that gives it the labels `want` and the owner label,
    and removes those the inventory gave before but no longer gives (their keys are in LABEL_KEYS; any
    other label, e.g. one a user added, stays); None when nothing changes."""
    return owned_labels_patch(meta, want, LABEL_KEYS, {OWNER_LABEL: owner})


def cluster_role_owner(kube: Kube, name: str) -> Obj:
    """An ownerReference to the ClusterRole `name` (it must exist: its UID is the reference's)."""
    role = kube.get(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "name": name,
        "uid": role["metadata"]["uid"],
    }


class NodeOwner:
    """Keeps the Nodes of `inventory` (this shard's: `owns`) in the cluster, labelled `owner`: creates the
    missing, relabels the changed, deletes its own that the inventory no longer names. `owner_ref`: the
    ownerReference every Node gets (None: none)."""

    def __init__(
        self,
        kube: Kube,
        inventory: InventoryFile,
        *,
        owner: str,
        owns: Callable[[str], bool],
        owner_ref: Obj | None = None,
    ) -> None:
        self._kube = kube
        self._inventory = inventory
        self._owner = owner
        self._owns = owns
        self._owner_ref = owner_ref
        self._foreign: set[str] = set()  # names taken by Nodes we did not make (logged once)

    def sync(self) -> tuple[int, int, int]:
        """One pass; (created, relabelled, deleted)."""
        # GFD's timestamp: when the inventory was written, so it changes with the labels, not every sync.
        want = simulated_nodes(self._inventory.inventory, self._owns, timestamp=self._inventory.written)
        ours, _ = self._kube.list(NODES, label_selector=f"{OWNER_LABEL}={self._owner}", metadata_only=True)
        have = {n["metadata"]["name"]: n["metadata"] for n in ours if self._owns(n["metadata"]["name"])}
        created = relabelled = deleted = 0
        for name in sorted(set(want) - set(have)):
            created += self._create(name, want[name])
        for name in sorted(set(want) & set(have)):
            patch = label_patch(have[name], want[name], self._owner)
            if patch:
                self._kube.patch(f"{NODES}/{name}", patch)
                relabelled += 1
        for name in sorted(set(have) - set(want)):
            self._kube.delete(f"{NODES}/{name}")
            deleted += 1
        if created or relabelled or deleted:
            log.info("simulated Nodes: %d created, %d relabelled, %d deleted", created, relabelled, deleted)
        return created, relabelled, deleted

    def _create(self, name: str, labels: dict[str, str]) -> int:
        body = simulated_node(
            name,
            {**labels, OWNER_LABEL: self._owner},
            annotations={LABEL_KEYS: ",".join(sorted(labels))},
            owner_ref=self._owner_ref,
        )
        try:
            self._kube.create(NODES, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            if name not in self._foreign:
                self._foreign.add(name)
                log.warning(
                    "node %s exists and is not this fleet's (no %s=%s): left alone",
                    name,
                    OWNER_LABEL,
                    self._owner,
                )
            return 0
        return 1

    def run(self, stop: threading.Event) -> None:
        """Until `stop`: sync now, when the inventory changed, and every SYNC_SECONDS."""
        # The hosts' inventory poll reloads the file (runtime.nodes): a changed file is a new Inventory.
        seen, since = None, SYNC_SECONDS
        while not stop.is_set():
            if self._inventory.inventory is not seen or since >= SYNC_SECONDS:
                seen, since = self._inventory.inventory, 0.0
                try:
                    self.sync()
                except Exception as exc:  # the API server away or refusing: next time
                    log.warning("syncing the simulated Nodes failed: %s", exc)
            stop.wait(INVENTORY_POLL_SECONDS)
            since += INVENTORY_POLL_SECONDS
