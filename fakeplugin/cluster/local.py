"""A real local Kubernetes cluster without Docker: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, one real kubelet (with the fake CRI, and our plugin) per kubelet node of the
inventory, and API-only Node objects for the rest. Loopback only; layout in fakeplugin.cluster.layout.

Cluster is the front, on inspection (what it shows); the rooms behind it: state (cluster.json, the
lock), supervisor (processes), machine (tools, binaries, ports), credentials, kubectl, controlplane, nodes
(API-only and kubelet nodes), plugins (`fakeplugin serve` per kubelet node), crirecords (what the fake CRI
recorded).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from fakeplugin.cluster import binaries, versions
from fakeplugin.cluster.components import LOOPBACK, Ports
from fakeplugin.cluster.computedomains import ComputeDomains, fabric_nodes
from fakeplugin.cluster.controlplane import start_control_plane
from fakeplugin.cluster.credentials import make_credentials
from fakeplugin.cluster.inspection import Inspection
from fakeplugin.cluster.karpenter import Karpenter, KarpenterRequest
from fakeplugin.cluster.keda import Keda, KedaRequest
from fakeplugin.cluster.kueue import Kueue, KueueRequest
from fakeplugin.cluster.machine import allocate_ports, check_host, find_binaries
from fakeplugin.cluster.nodes import KubeletNodes, register_simulated_nodes
from fakeplugin.cluster.prometheus import Prometheus, PrometheusRequest, endpoints
from fakeplugin.cluster.simulated import SimulatedNodes
from fakeplugin.cluster.simulated import fleet_shards as simulated_fleet_shards
from fakeplugin.cluster.state import (
    ClusterError,
    ClusterNode,
    State,
    cluster_nodes,
    remove_runtime_state,
)
from fakeplugin.cluster.supervisor import take_down
from fakeplugin.cluster.view import View
from fakeplugin.cluster.watchdog import Watchdog
from fakeplugin.inventory import load_inventory
from fakeplugin.inventory.file import written

log = logging.getLogger("fakeplugin.cluster")

DEFAULT_STATE_DIR = binaries.DEFAULT_STATE_DIR


class Cluster(Inspection):
    """Handle on a local cluster's state dir. Start one with Cluster.up(), attach with Cluster(state_dir).
    What it shows (kubeconfig, nodes, URLs, kubectl, container records, call logs) is Inspection's."""

    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR) -> None:
        super().__init__(state_dir)
        self._kubelets = KubeletNodes(self._store, self._processes, self._kubectl)
        self._simulated = SimulatedNodes(self._store, self._processes, self._kubectl)
        self._compute_domains = ComputeDomains(self._store, self._processes, self._kubectl)
        self._kueue = Kueue(self._store, self._processes, self._kubectl)
        self._prometheus = Prometheus(self._store, self._processes)
        self._keda = Keda(self._store, self._processes, self._kubectl)
        self._karpenter = Karpenter(self._store, self._processes, self._kubectl)
        self._view = View(self._store, self._processes)
        self._watchdog: Watchdog | None = None

    # ---- starting and stopping ------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        inventory: Path,
        state_dir: Path = DEFAULT_STATE_DIR,
        *,
        feature_gates: dict[str, bool] | None = None,
        plugin: bool = True,
        simulated_nodes: int = 0,
        build: bool = False,
        plugin_args: Sequence[str] = (),
        kubernetes_version: str | None = None,
        kueue: KueueRequest | None = None,
        prometheus: PrometheusRequest | None = None,
        telemetry: bool = False,
        keda: KedaRequest | None = None,
        karpenter: KarpenterRequest | None = None,
        fleet_shards: int | None = None,
        watchdog: bool = False,
        view_endpoint: str = "",
        binding_conditions: bool = False,
        binding_timeout: int = 0,
    ) -> Cluster:
        """Start a cluster for `inventory`; returns when every node is Ready (and every GPU node's
        plugin has published its slices). On failure everything started is stopped again (logs stay).

        `kubernetes_version`: any supported 1.34.x to 1.38.x (fakeplugin.cluster.versions), default
        $FAKEPLUGIN_K8S_VERSION, else the default; `feature_gates` default to that minor's. `kueue`
        (fakeplugin.cluster.kueue.request): Kueue too, started after Prometheus; `prometheus`
        (fakeplugin.cluster.prometheus.request): Prometheus scraping every plugin's telemetry, before Kueue;
        `telemetry`: every kubelet node's plugin and every fleet serves its dcgm-exporter endpoint on
        loopback (`telemetry_urls`; implied by `prometheus`);
        `keda` (fakeplugin.cluster.keda.request): KEDA's operator and metrics API server, after Kueue;
        `karpenter` (fakeplugin.cluster.karpenter.request): Karpenter's kwok provider with the inventory's
        instanceType entries, after KEDA; kwok and the fleet then run even with no simulated node yet.
        `fleet_shards`: fleet processes for the simulated nodes (default: one, two above 1000 simulated
        nodes; fakeplugin.fleet.shard).
        `view_endpoint`: HOST:PORT (PORT 0: a free one) of the fleet view, started last (`view_url`).
        `binding_conditions`: the ComputeDomain side (controller, plugins, fleet) runs with
        `--binding-conditions` (docs/compute-domains.md, *Binding conditions*); `binding_timeout`: the
        scheduler's binding-condition wait in seconds (0: its default, 600 s; only from 1.36).
        `watchdog`: the cluster goes down when this process ends without `down()` (killed, say;
        fakeplugin.cluster.watchdog), as a test session's must; off for `fakeplugin cluster up`."""
        if prometheus is not None and not plugin:
            raise ClusterError(
                "--with prometheus scrapes the plugins' telemetry: it needs the plugins (no --no-plugin)"
            )
        telemetry = telemetry or prometheus is not None
        cluster = cls(state_dir)
        cluster.layout.root.mkdir(parents=True, exist_ok=True)
        with cluster._store.locked():
            cluster._store.refuse_if_running()
            if watchdog:
                cluster._watchdog = Watchdog(cluster.layout.root, cluster.layout.log("watchdog"))
            started = time.monotonic()
            try:
                version = kubernetes_version or versions.selected()
                k8s = versions.release(version)
                gates = dict(k8s.feature_gates) if feature_gates is None else feature_gates
                versions.check_workload_gates(version, gates)
                cluster._start(
                    Path(inventory).absolute(),
                    gates,
                    plugin,
                    simulated_nodes,
                    build,
                    plugin_args,
                    version,
                    fleet_shards,
                    telemetry,
                    prometheus is not None,
                    karpenter is not None,
                    binding_conditions=binding_conditions,
                    binding_timeout=binding_timeout,
                )
                if prometheus is not None:
                    cluster._prometheus.start(prometheus)
                if kueue is not None:
                    cluster._kueue.start(kueue)
                if keda is not None:
                    cluster._keda.start(keda)
                if karpenter is not None:
                    cluster._karpenter.start(karpenter)
                if view_endpoint:
                    cluster._view.start(view_endpoint)
            except BaseException:
                state = cluster._store.state
                if state and state.processes:
                    log.error("cluster up failed; stopping what it started (logs in %s)", cluster.layout.logs)
                cluster._processes.stop_all()
                remove_runtime_state(cluster.layout, purge=False)
                cluster._release_watchdog()
                raise
        log.info("cluster up in %.0f s; kubeconfig: %s", time.monotonic() - started, cluster.kubeconfig)
        return cluster

    def _start(
        self,
        inventory_path: Path,
        gates: dict[str, bool],
        plugin: bool,
        simulated_nodes: int,
        build: bool,
        plugin_args: Sequence[str],
        version: str,
        fleet_shards: int | None,
        telemetry: bool,
        prometheus: bool,
        autoscaled: bool,
        *,
        binding_conditions: bool,
        binding_timeout: int,
    ) -> None:
        """Control plane, then nodes, then plugins; each step waits for what the next one needs.
        `telemetry`: every plugin and fleet gets a telemetry endpoint; `prometheus`: Prometheus a port;
        `autoscaled`: Karpenter adds simulated nodes later (kwok and the fleet run, maybe with no node)."""
        inventory = load_inventory(inventory_path)
        stamp = written(inventory_path)  # GFD's timestamp, as the plugins and the fleet label (state.py)
        nodes = cluster_nodes(inventory, simulated_nodes, autoscaled=autoscaled, timestamp=stamp)
        kubelet_nodes = [n for n in nodes if n.kubelet]
        simulated = [n for n in nodes if not n.kubelet]
        shards = fleet_shards or simulated_fleet_shards(len(simulated))
        check_host(self.layout.root, [self._store.dirs(n) for n in kubelet_nodes])
        bins = find_binaries(build, version)
        log.info("Kubernetes %s", version)
        self._store.state, cp = new_state(
            inventory_path, gates, plugin, plugin_args, version, nodes, shards, telemetry, prometheus
        )
        self._store.state.binding_conditions = binding_conditions
        self._store.save()
        make_credentials(self.layout, self._store.state.server)
        start_control_plane(
            self._processes,
            self._kubectl,
            self.layout,
            bins,
            cp,
            gates,
            versions.release(version),
            binding_timeout=binding_timeout,
        )
        register_simulated_nodes(self._kubectl, simulated)
        if simulated or autoscaled:
            self._simulated.start_kwok(bins["kwok"])
        for node in kubelet_nodes:
            self._kubelets.start(bins, node, gates)
        self._kubelets.wait_ready(kubelet_nodes)
        if plugin:
            self._plugins.install_device_classes()
            if simulated or autoscaled:
                self._simulated.start_fleet(
                    compute_domains=bool(fabric_nodes(inventory, simulated)), shards=shards
                )
            for node in kubelet_nodes:
                self._plugins.start(node)
            self._plugins.wait_published(inventory, kubelet_nodes)
            self._simulated.wait_published(inventory, simulated)
            if fabric_nodes(inventory, nodes):
                self._compute_domains.start(inventory, nodes)

    def down(self, purge: bool = False) -> None:
        """Stop every process this cluster started (only those: pid + command line must match), then
        remove the runtime state; logs stay unless `purge`."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        take_down(self._store, self._processes, purge)
        self._release_watchdog()
        log.info(
            "cluster in %s is down%s", self.layout.root, "" if purge else f"; logs kept in {self.layout.logs}"
        )

    def _release_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.release()
            self._watchdog = None

    # ---- restarts (the read-only API is Inspection's) ----------------------------------------------

    def restart_kubelet(self, node: str) -> None:
        """Stop and start a node's kubelet (same config, same root dir); returns once it is healthy."""
        self._kubelets.restart_kubelet(self._store.kubelet_node(node))

    def restart_plugin(self, node: str, *, args: Sequence[str] | None = None) -> None:
        """Stop and start a node's plugin; returns once the kubelet has registered it again.

        args, when given, become the plugins' extra `fakeplugin serve` flags from now on."""
        self._plugins.restart(self._store.kubelet_node(node), args)

    def kill_fleet(self) -> None:
        """`kill -9` the simulated nodes' `fakeplugin fleet`, every shard (by the recorded pids);
        `start_fleet` starts them again."""
        self._simulated.kill_fleet()

    def start_fleet(self) -> None:
        """Start the simulated nodes' fleet with the command line `up` gave it (after `kill_fleet`);
        returns once it runs, not once it caught up."""
        simulated = [n for n in self.nodes() if not n.kubelet]
        self._simulated.start_fleet(
            compute_domains=bool(fabric_nodes(load_inventory(self.inventory), simulated)),
            shards=self._simulated.fleet_shards(),
        )


def new_state(
    inventory_path: Path,
    gates: dict[str, bool],
    plugin: bool,
    plugin_args: Sequence[str],
    version: str,
    nodes: list[ClusterNode],
    shards: int,
    telemetry: bool,
    prometheus: bool,
) -> tuple[State, Ports]:
    """A new cluster's record and its control plane's ports, every port allocated at once: the control
    plane's, each kubelet's, with `telemetry` each plugin's and fleet's telemetry endpoint, with
    `prometheus` Prometheus'."""
    kubelet_nodes = [n for n in nodes if n.kubelet]
    simulated = [n for n in nodes if not n.kubelet]
    scraped = endpoints(kubelet_nodes, simulated, shards) if telemetry else []
    cp, kubelet_ports, extra = allocate_ports([n.name for n in kubelet_nodes], len(scraped) + prometheus)
    state = State(
        inventory=str(inventory_path),
        server=f"https://{LOOPBACK}:{cp.apiserver}",
        feature_gates=gates,
        plugin=plugin,
        plugin_args=list(plugin_args),
        ports={
            "etcdClient": cp.etcd_client,
            "etcdPeer": cp.etcd_peer,
            "apiserver": cp.apiserver,
            "scheduler": cp.scheduler,
            "controllerManager": cp.controller_manager,
            **({"prometheus": extra[-1]} if prometheus else {}),
        },
        nodes=nodes,
        kubelet_ports=kubelet_ports,
        kubernetes_version=version,
        telemetry_ports=dict(zip(scraped, extra, strict=False)),
    )
    return state, cp
