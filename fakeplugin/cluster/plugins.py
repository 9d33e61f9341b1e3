"""`fakeplugin serve` on the kubelet nodes of a local cluster: started like NVIDIA's chart runs the
driver (DeviceClasses first), restarted, and waited for until its slices are published and the kubelet
has registered it (a NotifyRegistrationStatus with registered=true in the node's call log). Each GPU
plugin gets the mock NVML library (fakeplugin.nvml), built into the build cache once, so its claims'
containers get NVML; where no C compiler builds it, one warning, and containers get no NVML."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fakeplugin
from fakeplugin import DEFAULT_DRIVER_NAME
from fakeplugin.cluster import binaries, components
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.state import ClusterNode, StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.drivers.gpu import device_classes
from fakeplugin.inventory import Inventory
from fakeplugin.nvml.build import NvmlBuildError, build
from fakeplugin.server.calllog import CALL_LOG_NAME, read_calls

log = logging.getLogger("fakeplugin.cluster")


@functools.cache  # once per process: built in seconds, then found in the cache; one warning at most
def nvml_library(cache_root: Path) -> Path | None:
    """The mock NVML library under `cache_root` (fakeplugin.nvml.build: compiled once per source); None,
    with one warning naming the compiler's complaint, where it cannot be built (no C compiler): the
    cluster runs and its containers get no NVML."""
    try:
        return build(cache_root)
    except NvmlBuildError as e:
        log.warning(
            "the mock NVML library cannot be built, so containers get no NVML (docs/emulation.md, NVML in "
            "the container; install a C compiler, or set CC): %s",
            e,
        )
        return None


class Plugins:
    """The plugin processes `plugin/<node>`, one per kubelet node."""

    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store = store
        self._processes = processes
        self._kubectl = kubectl

    def install_device_classes(self) -> None:
        self._kubectl.send("apply", device_classes(DEFAULT_DRIVER_NAME))
        log.info("DeviceClasses of %s created (as NVIDIA's chart does)", DEFAULT_DRIVER_NAME)

    def start(self, node: ClusterNode) -> None:
        """Start the node's plugin with the mock NVML library (when it builds) and the state's extra flags
        (after it: `--plugin-args --nvml-library=` turns NVML off); returns at once (see wait_published)."""
        state = self._store.require()
        name = f"plugin/{node.name}"
        library = nvml_library(binaries.cache_root())
        argv = components.plugin_argv(
            sys.executable,
            Path(state.inventory),
            self._store.layout,
            self._store.dirs(node),
            # The node's GPU Operator labels, set at `up` (state.cluster_nodes), kept current by its plugin.
            [
                "--gpu-operator-labels",
                *components.nvml_args(library),
                *state.plugin_args,
                *components.telemetry_args(state.telemetry_ports, name),
            ],
        )
        env = components.python_env(os.environ, Path(fakeplugin.__file__).resolve().parents[1])
        self._processes.launch(name, [argv], env=env)

    def restart(self, node: ClusterNode, args: Sequence[str] | None) -> None:
        """Stop and start the node's plugin (with `args` as every plugin's extra flags from now on, when
        given); returns once the kubelet has registered it again."""
        if args is not None:
            self._store.require().plugin_args = list(args)
            self._store.save()
        before = self._registrations(node)
        self._processes.stop(self._processes.record(f"plugin/{node.name}"))
        self.start(node)
        self._wait_registered(node, before)

    def wait_published(self, inventory: Inventory, kubelet_nodes: list[ClusterNode]) -> None:
        """Each kubelet node whose inventory entry has GPUs: wait for its plugin's ResourceSlices; then
        each kubelet node: wait until its kubelet registered the plugin."""
        expected = {
            n.name for n in kubelet_nodes if (e := inventory.node_entry(n.name, n.labels)) and e.gpu_count
        }
        watch = self._processes.records("plugin/", "kubelet/")

        def published() -> bool:
            slices = self._kubectl.items("resourceslices")
            if slices is None:
                return False
            return expected <= {
                s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == DEFAULT_DRIVER_NAME
            }

        if expected:
            self._processes.wait(
                f"the plugins' ResourceSlices of {', '.join(sorted(expected))}", published, watch
            )
        # Slices alone are not enough: a pod the scheduler places before the kubelet registered the plugin
        # fails with "DRA driver ... is not registered" and is retried only at the next pod sync.
        for node in kubelet_nodes:
            self._wait_registered(node, before=[])

    def call_log(self, node: ClusterNode) -> Path:
        """The node's plugin's call log (fakeplugin.server.calllog), beside its checkpoint."""
        return self._store.dirs(node).plugins_dir / DEFAULT_DRIVER_NAME / CALL_LOG_NAME

    def calls(
        self, node: ClusterNode, *, claim: str | None = None, method: str | None = None
    ) -> list[dict[str, Any]]:
        return read_calls(self.call_log(node), claim=claim, method=method)

    def _registrations(self, node: ClusterNode) -> list[dict[str, Any]]:
        records = self.calls(node, method="NotifyRegistrationStatus")
        return [r for r in records if r.get("registered") and r.get("result") == "ok"]

    def _wait_registered(self, node: ClusterNode, before: list[dict[str, Any]]) -> None:
        """Wait until the node's call log shows a kubelet registration that is not one of `before`.

        (Not a count: a rotation of the call log may drop old records, never add them.)"""
        self._processes.wait(
            f"the kubelet of {node.name} to register its plugin",
            lambda: any(r not in before for r in self._registrations(node)),
            [self._processes.record(f"plugin/{node.name}"), self._processes.record(f"kubelet/{node.name}")],
        )
