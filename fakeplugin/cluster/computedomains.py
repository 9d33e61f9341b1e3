"""The ComputeDomain side of a local cluster whose inventory has nodes with a `fabric`, deployed as NVIDIA's
chart deploys it with `resources.computeDomains.enabled` (drivers.computedomain, docs/compute-domains.md):
the two CRDs, the two DeviceClasses, the driver namespace with the daemon pods' ServiceAccount, the
controller (`compute-domain-controller`, process `cd-controller`), and on each kubelet node with a fabric
the compute-domain.nvidia.com kubelet plugin beside the GPU plugin (process `cd-plugin/<node>`), with
`--emulate-daemon`: the fake CRI runs no daemon container, so the plugin does the daemon's part. On the
simulated nodes the fleet is that plugin (`fleet --compute-domains`, started by fakeplugin.cluster.simulated).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import fakeplugin
from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import components
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.state import ClusterNode, StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.drivers.computedomain import device_classes
from fakeplugin.drivers.computedomain.controller.objects import DAEMON_SERVICE_ACCOUNT
from fakeplugin.inventory import Inventory
from fakeplugin.server.calllog import CALL_LOG_NAME, read_calls

log = logging.getLogger("fakeplugin.cluster")

NAMESPACE = "nvidia-dra-driver-gpu"  # the driver namespace NVIDIA's docs install the chart into
CONTROLLER = "cd-controller"
FLEET = "fleet"  # fakeplugin.cluster.simulated's process
PLUGIN_PREFIX = "cd-plugin/"


def fabric_nodes(inventory: Inventory, nodes: list[ClusterNode]) -> list[ClusterNode]:
    """The nodes whose inventory entry has a fabric (a clique ID)."""
    return [n for n in nodes if (e := inventory.node_entry(n.name, n.labels)) and e.clique_id]


def describe_nodes(names: set[str]) -> str:
    return ", ".join(sorted(names)) if len(names) <= 4 else f"{len(names)} nodes"


class ComputeDomains:
    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store, self._processes, self._kubectl = store, processes, kubectl

    def start(self, inventory: Inventory, nodes: list[ClusterNode]) -> None:
        """CRDs, classes, namespace, controller and the kubelet nodes' plugins; returns once every fabric
        node's plugin (the fleet, on a simulated node) has published its slice."""
        crds = api.crds()
        self._kubectl.send("apply", crds)
        for crd in crds:
            name = crd["metadata"]["name"]
            self._kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DAEMON_SERVICE_ACCOUNT, "namespace": NAMESPACE},
        }
        self._kubectl.send("apply", [namespace])
        self._kubectl.send("apply", [account, *device_classes()])
        log.info(
            "ComputeDomain CRDs, DeviceClasses and namespace %s created (as NVIDIA's chart does)", NAMESPACE
        )
        env = components.python_env(os.environ, Path(fakeplugin.__file__).resolve().parents[1])
        layout = self._store.layout
        state = self._store.require()
        binding = ["--binding-conditions"] if state.binding_conditions else []
        controller = [sys.executable, "-m", "fakeplugin", "compute-domain-controller"]
        controller += [
            f"--kubeconfig={layout.kubeconfig}",
            f"--namespace={NAMESPACE}",
            f"--pod-name={CONTROLLER}",
            *binding,
        ]
        self._processes.launch(CONTROLLER, [controller], env=env)
        fabric = fabric_nodes(inventory, nodes)
        kubelet_nodes = [n for n in fabric if n.kubelet]
        for node in kubelet_nodes:
            # The GPU plugin's extra flags (state.plugin_args) are not this plugin's.
            argv = components.plugin_argv(
                sys.executable, Path(state.inventory), layout, self._store.dirs(node)
            )
            argv += ["--plugin=compute-domains", f"--namespace={NAMESPACE}", "--emulate-daemon", *binding]
            self._processes.launch(f"{PLUGIN_PREFIX}{node.name}", [argv], env=env)
        expected = {n.name for n in fabric}

        def published() -> bool:
            slices = self._kubectl.items("resourceslices") or []
            return expected <= {
                s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == api.DRIVER_NAME
            }

        if not expected:
            return
        watch = self._processes.records(PLUGIN_PREFIX, CONTROLLER, FLEET)
        self._processes.wait(f"the {api.DRIVER_NAME} slices of {describe_nodes(expected)}", published, watch)
        # As the GPU plugins: a pod placed before registration waits for the kubelet's next pod sync.
        for node in kubelet_nodes:
            calls = self._store.dirs(node).plugins_dir / api.DRIVER_NAME / CALL_LOG_NAME

            def registered(calls: Path = calls) -> bool:
                records = read_calls(calls, method="NotifyRegistrationStatus")
                return any(r.get("registered") and r.get("result") == "ok" for r in records)

            self._processes.wait(
                f"the kubelet of {node.name} to register {api.DRIVER_NAME}", registered, watch
            )
