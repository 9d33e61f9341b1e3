"""What a local cluster shows, read from its state dir: the kubeconfig, version, URLs, nodes and
processes; kubectl against it; a kubelet node's files, what the fake CRI (or the fleet) resolved for a
container, a plugin's call log. `Cluster` (local.py) is this plus starting, stopping and restarting.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fakeplugin.cluster import binaries, crirecords
from fakeplugin.cluster.components import LOOPBACK
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.layout import KubeletDirs, StateLayout
from fakeplugin.cluster.plugins import Plugins
from fakeplugin.cluster.prometheus import prometheus_url
from fakeplugin.cluster.state import ClusterNode, StateStore
from fakeplugin.cluster.supervisor import ProcessStatus, Supervisor


class Inspection:
    """The read-only API for tests and commands over the cluster of `state_dir` (its state, processes,
    kubectl, plugins' call logs)."""

    def __init__(self, state_dir: Path) -> None:
        self.layout = StateLayout(Path(state_dir).absolute())
        self._store = StateStore(self.layout)
        self._processes = Supervisor(self._store)
        self._kubectl = Kubectl(
            self.layout.kubeconfig,
            cache_dir=self.layout.kubectl_cache,
            binary=lambda: binaries.find("kubectl", version=self._store.kubernetes_version()),
        )
        self._plugins = Plugins(self._store, self._processes, self._kubectl)

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    @property
    def kubernetes_version(self) -> str:
        """The Kubernetes version the cluster runs, e.g. v1.37.2."""
        return self._store.require().kubernetes_version

    @property
    def view_url(self) -> str:
        """The fleet view's page (`up(view_endpoint=...)`), e.g. http://127.0.0.1:8470/; empty: none."""
        return self._store.require().view_url

    @property
    def inventory(self) -> Path:
        """The inventory file the cluster was started with; its plugins re-read it when it changes."""
        return Path(self._store.require().inventory)

    @property
    def prometheus_url(self) -> str | None:
        """Prometheus' web UI and API (`--with prometheus`), e.g. http://127.0.0.1:9090/; None without."""
        port = self._store.require().ports.get("prometheus")
        return None if port is None else prometheus_url(port)

    @property
    def telemetry_urls(self) -> dict[str, str]:
        """Each telemetry endpoint's /metrics (`up(telemetry=True)` or Prometheus), by the process serving
        it (`plugin/<node>`, `fleet`, `fleet/<i>`); empty without."""
        ports = self._store.require().telemetry_ports
        return {name: f"http://{LOOPBACK}:{port}/metrics" for name, port in ports.items()}

    def nodes(self) -> list[ClusterNode]:
        """The cluster's nodes: kubelet nodes and API-only ones, in inventory order, then the plain
        simulated ones."""
        return list(self._store.require().nodes)

    def status(self) -> list[ProcessStatus]:
        return self._processes.statuses()

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, a failure raises ClusterError with its stderr."""
        return self._kubectl(*args, input=input, check=check, timeout=timeout)

    def node_dirs(self, node: str) -> KubeletDirs:
        """Files of a kubelet node (kubelet root, CDI dir, fake CRI records, ...)."""
        return self._store.dirs(self._store.kubelet_node(node))

    def container_record(self, namespace: str, pod: str, container: str) -> dict[str, Any]:
        """What the fake CRI got and resolved for a container (newest record if on several nodes); on a
        simulated node, what the fleet resolved the same way (fakeplugin.fleet.records)."""
        return crirecords.container_record(self._store.every_node_dirs(), namespace, pod, container)

    def run_in_container_view(
        self, namespace: str, pod: str, container: str, script: str, *args: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell script of the container's (e.g. /usr/bin/nvidia-smi) as a workload there would see
        it: see fakeplugin.cluster.crirecords.run_in_container_view."""
        record = self.container_record(namespace, pod, container)
        return crirecords.run_in_container_view(record, script, *args)

    def run_as_container(
        self, namespace: str, pod: str, container: str, argv: Sequence[str], *, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a host command as the container: its env and NVML (fakeplugin.cluster.crirecords
        .run_as_container), on a kubelet node (the fake CRI's record) or a simulated one (the fleet's, from
        the CDI specs its Prepare wrote). LookupError when the pod is not found, not on a node of this
        cluster, not running, or has no such container (crirecords.check_runnable)."""
        found = self._kubectl("get", "pod", pod, "-n", namespace, "-o", "json", check=False)
        pod_obj = json.loads(found.stdout) if found.returncode == 0 else None
        nodes = {d.name for d in self._store.every_node_dirs()}
        crirecords.check_runnable(pod_obj, f"{namespace}/{pod}", container, nodes, found.stderr.strip())
        record = self.container_record(namespace, pod, container)
        return crirecords.run_as_container(record, argv, timeout=timeout)

    def call_log(self, node: str) -> Path:
        """The call log of a kubelet node's plugin: every gRPC call it answered (see server.calllog)."""
        return self._plugins.call_log(self._store.kubelet_node(node))

    def calls(self, node: str, claim: str | None = None, method: str | None = None) -> list[dict[str, Any]]:
        """The records of a node's call log, oldest first; claim: "namespace/name" or a UID, method: a
        short name such as "NodePrepareResources"."""
        return self._plugins.calls(self._store.kubelet_node(node), claim=claim, method=method)
