"""The control plane of a local cluster: etcd, kube-apiserver, kube-scheduler, kube-controller-manager."""

from __future__ import annotations

from pathlib import Path

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import components
from fakeplugin.cluster.components import LOOPBACK, Ports
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.cluster.versions import KubernetesRelease


def start_control_plane(
    processes: Supervisor,
    kubectl: Kubectl,
    layout: StateLayout,
    bins: dict[str, Path],
    ports: Ports,
    gates: dict[str, bool],
    k8s: KubernetesRelease,
    *,
    binding_timeout: int = 0,
) -> None:
    """Start the four components in dependency order; returns once each one is healthy.
    `binding_timeout`: the scheduler's (components.scheduler_config)."""
    processes.launch("etcd", [components.etcd_argv(bins["etcd"], layout, ports)])
    processes.wait_http("etcd", f"http://{LOOPBACK}:{ports.etcd_client}/health")
    processes.launch(
        "kube-apiserver", [components.apiserver_argv(bins["kube-apiserver"], layout, ports, gates, k8s)]
    )
    processes.wait("kube-apiserver", lambda: kubectl("get", "--raw", "/readyz", check=False).returncode == 0)
    config = components.scheduler_config(layout, binding_timeout=binding_timeout)
    config = yaml.safe_dump(config, sort_keys=False).encode()
    write_atomic(layout.scheduler_config, config, mode=0o644)
    processes.launch(
        "kube-scheduler", [components.scheduler_argv(bins["kube-scheduler"], layout, ports, gates)]
    )
    processes.launch(
        "kube-controller-manager",
        [components.controller_manager_argv(bins["kube-controller-manager"], layout, ports, gates)],
    )
    processes.wait_http("kube-scheduler", f"https://{LOOPBACK}:{ports.scheduler}/healthz")
    processes.wait_http("kube-controller-manager", f"https://{LOOPBACK}:{ports.controller_manager}/healthz")
