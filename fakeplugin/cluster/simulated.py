"""The simulated nodes of a local cluster (`kubelet: false`, and the plain `--simulated-nodes`): kwok
plays the nodes and moves their pods through its stages; one `fakeplugin fleet` is the DRA side of all of them
(their slices, and preparing claims before kwok may start a pod). See fakeplugin.fleet."""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import fakeplugin
from fakeplugin import DEFAULT_DRIVER_NAME
from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import binaries, components, computedomains, plugins
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.state import ClusterNode, StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.fleet.stages import kwok_config_yaml
from fakeplugin.inventory import Inventory

log = logging.getLogger("fakeplugin.cluster")

KWOK = "kwok"
FLEET = computedomains.FLEET
PUBLISH_TIMEOUT = 300.0  # a thousand-node fleet on a busy 2-core machine
# Above this many simulated nodes `up` runs two fleet processes, each a shard (fakeplugin.fleet.shard).
NODES_PER_FLEET = 1000


def fleet_shards(simulated_nodes: int) -> int:
    """How many fleet processes `up` runs for this many simulated nodes by default."""
    return 2 if simulated_nodes > NODES_PER_FLEET else 1


def fleet_process(index: int, count: int) -> str:
    """The process name of a fleet shard: `fleet` when it is the only one, else `fleet/<i>`."""
    return FLEET if count == 1 else f"{FLEET}/{index}"


class SimulatedNodes:
    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store = store
        self._processes = processes
        self._kubectl = kubectl

    def start_kwok(self, binary: Path) -> None:
        layout = self._store.layout
        write_atomic(layout.kwok_config, kwok_config_yaml().encode(), mode=0o644)
        self._processes.launch(KWOK, [components.kwok_argv(binary, layout)])

    def start_fleet(self, *, compute_domains: bool, shards: int = 1) -> None:
        """`compute_domains`: the fleet is also the compute-domain.nvidia.com plugin of every simulated
        node, in the driver namespace of fakeplugin.cluster.computedomains; `shards`: that many fleet
        processes, each serving its shard of the nodes (`fleet/<i>`)."""
        state = self._store.require()
        library = plugins.nvml_library(binaries.cache_root())  # as the kubelet nodes' plugins get it
        argv = components.fleet_argv(
            sys.executable, Path(state.inventory), self._store.layout, state.plugin_args, library
        )
        # The nodes' GPU Operator labels, set at `up` (state.cluster_nodes) or by Karpenter at launch
        # (publish.instancetypes), kept current by each node's GPU plugin in the fleet.
        argv += ["--gpu-operator-labels"]
        if compute_domains:
            argv += ["--compute-domains", f"--namespace={computedomains.NAMESPACE}"]
            argv += ["--binding-conditions"] if state.binding_conditions else []
        env = components.python_env(os.environ, Path(fakeplugin.__file__).resolve().parents[1])
        for i in range(shards):
            name = fleet_process(i, shards)
            shard = [f"--shard={i}/{shards}"] if shards > 1 else []
            telemetry = components.telemetry_args(state.telemetry_ports, name)
            self._processes.launch(name, [argv + shard + telemetry], env=env)

    def kill_fleet(self) -> None:
        """SIGKILL the fleet, every shard of it (a crash: whatever it was doing stays half done)."""
        for record in self._processes.records(FLEET):
            self._processes.stop(record, crash=True)

    def fleet_shards(self) -> int:
        """How many fleet processes `up` started (their records stay when they are stopped)."""
        return len(self._processes.records(FLEET))

    def wait_published(self, inventory: Inventory, nodes: list[ClusterNode]) -> None:
        """Until every simulated node whose inventory entry has GPUs shows ResourceSlices."""
        expected = {n.name for n in nodes if (e := inventory.node_entry(n.name, n.labels)) and e.gpu_count}
        if not expected:
            return

        last = [0.0]

        def published() -> bool:
            # A thousand nodes' slices are megabytes of JSON: asked every few seconds, not every poll.
            if len(expected) > 50 and time.monotonic() - last[0] < 3:
                return False
            last[0] = time.monotonic()
            slices = self._kubectl.items("resourceslices")
            if slices is None:
                return False
            have = {s["spec"].get("nodeName") for s in slices if s["spec"]["driver"] == DEFAULT_DRIVER_NAME}
            return expected <= have

        self._processes.wait(
            f"the fleet's ResourceSlices of {len(expected)} simulated nodes",
            published,
            self._processes.records(FLEET),
            timeout=PUBLISH_TIMEOUT,
        )
