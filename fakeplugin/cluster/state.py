"""What a local cluster remembers (cluster.json), who may change it (the state-dir lock), and removing it.

Invariant: cluster.json is rewritten (atomically) after every change to the state, so `down`, `status`
and restarts from another process always see every process started so far.
"""

from __future__ import annotations

import fcntl
import json
import logging
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import versions
from fakeplugin.cluster.components import KubeletPorts
from fakeplugin.cluster.layout import KubeletDirs, StateLayout
from fakeplugin.cluster.processes import ProcessRecord, is_running, processes_of
from fakeplugin.cluster.versions import DEFAULT_VERSION
from fakeplugin.drivers.gpu import OWNED_ANNOTATION, gpu_node_labels, operator_labels
from fakeplugin.inventory import Inventory

log = logging.getLogger("fakeplugin.cluster")


class ClusterError(RuntimeError):
    """A local cluster cannot be started, changed or stopped; the message says why and where."""


@dataclass(frozen=True)
class ClusterNode:
    """A node of the local cluster: a real kubelet (index = its kubelet dir) or an API-only Node."""

    name: str
    kubelet: bool
    labels: dict[str, str]
    gpus: int
    index: int = -1
    # A simulated node's: the keys of the GPU Operator's labels (OWNED_ANNOTATION), as the fleet's
    # labeller records those it keeps, so that its first look finds nothing to change.
    annotations: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kubelet": self.kubelet,
            "labels": self.labels,
            "gpus": self.gpus,
            "index": self.index,
            "annotations": self.annotations,
        }


def cluster_nodes(
    inventory: Inventory, simulated_nodes: int, *, autoscaled: bool = False, timestamp: int = 0
) -> list[ClusterNode]:
    """The inventory's named nodes (by name, and every node of a namePrefix entry), then `simulated_nodes`
    plain API-only nodes (worker-1...); none at all only when `autoscaled` (Karpenter makes them). A
    node's labels are the entry's and the GPU Operator's, labelled at `timestamp` (GFD's; the inventory
    file's inventory.file.written, as the plugins and the fleet that keep them label).

    Selector and instanceType entries name no node: they only decide what is published on matching nodes.
    """
    nodes: list[ClusterNode] = []
    kubelets = 0
    for entry in inventory.nodes:
        labels = gpu_node_labels(inventory, entry, timestamp=timestamp)
        owned = ",".join(sorted(operator_labels(inventory, entry, timestamp=timestamp)))
        annotations = {OWNED_ANNOTATION: owned} if owned and not entry.kubelet else {}
        for name in entry.node_names():
            index = kubelets if entry.kubelet else -1
            nodes.append(ClusterNode(name, entry.kubelet, labels, entry.gpu_count, index, annotations))
            kubelets += entry.kubelet
    taken = {n.name for n in nodes}
    for i in range(1, simulated_nodes + 1):
        name = f"worker-{i}"
        if name in taken:
            raise ClusterError(
                f"{inventory.source}: node {name} clashes with the extra worker of the same name"
            )
        nodes.append(ClusterNode(name, False, {}, 0))
    if not nodes and not autoscaled:
        raise ClusterError(
            f"{inventory.source}: no named nodes and no --simulated-nodes: the cluster would have no nodes"
        )
    return nodes


@dataclass
class State:
    """cluster.json: everything `down`, `status` and restarts need."""

    inventory: str
    server: str
    feature_gates: dict[str, bool]
    plugin: bool
    ports: dict[str, int]
    nodes: list[ClusterNode]
    kubelet_ports: dict[str, dict[str, int]] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    plugin_args: list[str] = field(default_factory=list)  # extra `fakeplugin serve` flags, e.g. feature gates
    kubernetes_version: str = DEFAULT_VERSION  # every binary of the cluster is this version's
    # With --with prometheus: each plugin's and fleet's telemetry endpoint, process name → loopback port.
    telemetry_ports: dict[str, int] = field(default_factory=dict)
    view_url: str = ""  # the fleet view's page, when `up` started it (fakeplugin.cluster.view)
    binding_conditions: bool = False  # the ComputeDomain side's --binding-conditions (opt-in, ours)

    def to_json(self) -> dict[str, Any]:
        return {
            "inventory": self.inventory,
            "server": self.server,
            "featureGates": self.feature_gates,
            "plugin": self.plugin,
            "ports": self.ports,
            "kubeletPorts": self.kubelet_ports,
            "nodes": [n.to_json() for n in self.nodes],
            "processes": [p.to_json() for p in self.processes],
            "pluginArgs": self.plugin_args,
            "kubernetesVersion": self.kubernetes_version,
            "telemetryPorts": self.telemetry_ports,
            "viewURL": self.view_url,
            "bindingConditions": self.binding_conditions,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> State:
        return cls(
            inventory=data["inventory"],
            server=data["server"],
            feature_gates=data["featureGates"],
            plugin=data["plugin"],
            ports=data["ports"],
            kubelet_ports=data["kubeletPorts"],
            nodes=[ClusterNode(**n) for n in data["nodes"]],
            processes=[ProcessRecord.from_json(p) for p in data["processes"]],
            plugin_args=list(data.get("pluginArgs", [])),
            kubernetes_version=data.get("kubernetesVersion", DEFAULT_VERSION),
            telemetry_ports=dict(data.get("telemetryPorts", {})),
            view_url=data.get("viewURL", ""),
            binding_conditions=bool(data.get("bindingConditions", False)),
        )


class StateStore:
    """The state dir's cluster.json, read once on attach; `save()` after every change to `state`."""

    def __init__(self, layout: StateLayout) -> None:
        self.layout = layout
        self.state: State | None = None
        if layout.cluster_file.exists():
            self.state = State.from_json(json.loads(layout.cluster_file.read_text()))

    def require(self) -> State:
        if self.state is None:
            raise ClusterError(f"no cluster in {self.layout.root} (start one with `fakeplugin cluster up`)")
        return self.state

    def save(self) -> None:
        write_atomic(
            self.layout.cluster_file, json.dumps(self.require().to_json(), indent=2).encode(), mode=0o644
        )

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Held by `up` and `down`: one of them at a time works on a state dir."""
        with self.layout.lock_file.open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ClusterError(f"another `cluster up/down` is working on {self.layout.root}") from None
            yield

    def refuse_if_running(self) -> None:
        """Refuse while a cluster runs here; else clear what an earlier one left, logs included."""
        if self.state is None:
            remove_runtime_state(self.layout, purge=True)
            return
        alive = [p for p in self.state.processes if is_running(p)]
        if alive:
            raise ClusterError(
                f"a cluster is already running in {self.layout.root} ("
                + ", ".join(f"{p.name} pid {p.pid}" for p in alive)
                + f"); stop it first: fakeplugin cluster down --state-dir {self.layout.root}"
            )
        log.info("removing the state of a cluster that is no longer running in %s", self.layout.root)
        remove_runtime_state(self.layout, purge=True)
        self.state = None

    def kubelet_node(self, name: str) -> ClusterNode:
        """The kubelet node `name`; raises for unknown and API-only nodes."""
        for n in self.require().nodes:
            if n.name == name:
                if not n.kubelet:
                    raise ClusterError(f"node {name} is API-only: it has no kubelet and no node dirs")
                return n
        raise ClusterError(f"no node {name} in this cluster")

    def kubelet_nodes(self) -> list[ClusterNode]:
        return [n for n in self.require().nodes if n.kubelet]

    def dirs(self, node: ClusterNode) -> KubeletDirs:
        return self.layout.node(node.name, node.index)

    def every_node_dirs(self) -> list[KubeletDirs]:
        """The files of every node: the cluster's, then those of simulated nodes the cluster did not make
        (Karpenter's) that the fleet keeps files for, in <state>/nodes/ too."""
        nodes = self.require().nodes
        known = {n.name for n in nodes}
        found = sorted(p.name for p in (self.layout.root / "nodes").glob("*") if p.name not in known)
        return [self.dirs(n) for n in nodes] + [self.layout.node(name, -1) for name in found]

    def kubernetes_version(self) -> str:
        """The version of the cluster's binaries; before the state exists, the selected one."""
        return self.state.kubernetes_version if self.state else versions.selected()

    def kubelet_ports(self, node: str) -> KubeletPorts:
        ports = self.require().kubelet_ports[node]
        return KubeletPorts(kubelet=ports["kubelet"], healthz=ports["healthz"])


def remove_runtime_state(layout: StateLayout, purge: bool) -> None:
    """Remove what a cluster left in its state dir (logs too when `purge`), refusing while anything of it
    is mounted or still runs."""
    mounts = _mounts_under(layout.root)
    if mounts:  # never recurse through a mount (a kubelet namespace leaking would show here)
        raise ClusterError(f"not removing {layout.root}: mounts below it: {', '.join(mounts)}")
    users = processes_of(layout.root)
    if users:  # started for this state dir but not recognised as recorded: never signalled, so refuse
        raise ClusterError(
            f"not removing {layout.root}: processes started for it but not (or no longer) recorded "
            "in cluster.json still run; stop them yourself:\n  "
            + "\n  ".join(f"pid {pid}: {cmd}" for pid, cmd in users)
        )
    for path in layout.runtime_entries() + ([layout.logs] if purge else []):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]
