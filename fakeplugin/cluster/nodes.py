"""The nodes of a local cluster: real kubelet nodes (each a fake CRI and a kubelet in a private mount
namespace, see fakeplugin.cluster.components.ISOLATE), and the Node objects of simulated nodes
(fakeplugin.cluster.simulated runs kwok and the fleet for them)."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from pathlib import Path

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import binaries, components
from fakeplugin.cluster.components import LOOPBACK
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.state import ClusterNode, StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.fleet.nodeobjects import node_addresses, simulated_node

log = logging.getLogger("fakeplugin.cluster")


def register_simulated_nodes(kubectl: Kubectl, nodes: list[ClusterNode]) -> None:
    """Create the Node objects kwok plays (no kubelet behind them; node-lifecycle controller off)."""
    if not nodes:
        return
    # kubectl creates one at a time: a thousand nodes take a while on a busy machine.
    bodies = [simulated_node(n.name, n.labels, annotations=n.annotations) for n in nodes]
    kubectl.send("create", bodies, timeout=60 + len(nodes) / 10)
    shown = ", ".join(n.name for n in nodes[:5]) + (f" and {len(nodes) - 5} more" if len(nodes) > 5 else "")
    log.info("simulated nodes registered: %s", shown)


class KubeletNodes:
    """Start, restart and wait for the kubelet nodes of a cluster."""

    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store = store
        self._processes = processes
        self._kubectl = kubectl

    def start(self, bins: dict[str, Path], node: ClusterNode, gates: dict[str, bool]) -> None:
        """The node's dirs, boot ID and kubelet config, then its fake CRI and its kubelet (healthy)."""
        dirs = self._store.dirs(node)
        for d in (
            dirs.cdi,
            dirs.containers_dir,
            dirs.sysctl_dir,
            dirs.var_lib,
            dirs.var_log,
            dirs.pod_logs_dir,
            dirs.volume_plugin_dir,
            dirs.kubelet_root,
        ):
            d.mkdir(parents=True, exist_ok=True)
        write_atomic(dirs.boot_id_file, f"{uuid.uuid4()}\n".encode(), mode=0o644)
        config = components.kubelet_config(dirs, self._store.kubelet_ports(node.name), gates)
        write_atomic(dirs.kubelet_config, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o644)
        self._processes.launch(f"fakecri/{node.name}", [components.fakecri_argv(bins["fakecri"], dirs)])
        self._processes.wait(f"fakecri/{node.name}", dirs.cri_socket.exists)
        self.start_kubelet(node)

    def start_kubelet(self, node: ClusterNode) -> None:
        """Start the node's kubelet (same config, same root dir every time); returns once it is healthy."""
        dirs = self._store.dirs(node)
        kubelet = binaries.find("kubelet", version=self._store.kubernetes_version())
        argv = components.kubelet_argv(kubelet, self._store.layout, dirs)
        unshare, sh = shutil.which("unshare"), shutil.which("sh")
        assert unshare and sh
        self._processes.launch(f"kubelet/{node.name}", components.isolated_argvs(unshare, sh, dirs, argv))
        self._processes.wait_http(
            f"kubelet/{node.name}",
            f"http://{LOOPBACK}:{self._store.kubelet_ports(node.name).healthz}/healthz",
        )

    def restart_kubelet(self, node: ClusterNode) -> None:
        self._processes.stop(self._processes.record(f"kubelet/{node.name}"))
        self.start_kubelet(node)

    def wait_ready(self, kubelet_nodes: list[ClusterNode]) -> None:
        """Wait for the kubelets to register; give their Nodes addresses and labels; wait for all nodes
        of the cluster, simulated ones included, to be Ready."""
        names = {n.name for n in self._store.require().nodes}
        watch = self._processes.records("kubelet/", "fakecri/")

        def registered() -> bool:
            return {n.name for n in kubelet_nodes} <= set(self._ready())

        if kubelet_nodes:
            self._processes.wait("the kubelets to register their nodes", registered, watch)
        for node in kubelet_nodes:
            # The kubelet refuses a loopback --node-ip as the node's address ("nodeIP can't be loopback
            # address") and leaves the addresses empty; it never overwrites them once set.
            addresses = {"status": {"addresses": node_addresses(node.name)}}
            self._kubectl(
                "patch",
                "node",
                node.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps(addresses),
            )
            if node.labels:
                pairs = [f"{k}={v}" for k, v in node.labels.items()]
                self._kubectl("label", "node", node.name, "--overwrite", *pairs)
                log.info("node %s labelled %s", node.name, ", ".join(pairs))
        self._processes.wait(
            "all nodes to be Ready",
            lambda: {n for n, ready in self._ready().items() if ready} >= names,
            watch,
        )

    def _ready(self) -> dict[str, bool]:
        """Node name -> its Ready condition is True."""
        return {
            item["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in item.get("status", {}).get("conditions", [])
            )
            for item in self._kubectl.items("nodes") or []
        }
