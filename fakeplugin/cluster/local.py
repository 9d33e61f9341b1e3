"""A real local Kubernetes cluster without Docker: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, one real kubelet (with the fake CRI, and our plugin) per kubelet node of the
inventory, and API-only Node objects for the rest. Loopback only; layout in fakeplugin.cluster.layout.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import fakeplugin
from fakeplugin import DEFAULT_DRIVER_NAME
from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import binaries, components
from fakeplugin.cluster.components import KubeletPorts, Ports
from fakeplugin.cluster.layout import NodeDirs, StateLayout, too_long_sockets
from fakeplugin.cluster.processes import (
    ProcessRecord,
    is_running,
    processes_of,
    rss_bytes,
    spawn,
    stop,
)
from fakeplugin.prepare import smi
from fakeplugin.publish.deviceclasses import device_classes
from fakeplugin.publish.inventory import Inventory, load_inventory
from fakeplugin.server.registration import REGISTERED_LOG

log = logging.getLogger("fakeplugin.cluster")

DEFAULT_STATE_DIR = binaries.cache_root() / "cluster"
START_TIMEOUT = 120.0
POLL_SECONDS = 0.5
# Stop order: consumers before what they consume.
STOP_ORDER = (
    "plugin/",
    "kubelet/",
    "fakecri/",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-apiserver",
    "etcd",
)


class ClusterError(RuntimeError):
    pass


@dataclass(frozen=True)
class ClusterNode:
    """A node of the local cluster: a real kubelet (index = its kubelet dir) or an API-only Node."""

    name: str
    kubelet: bool
    labels: dict[str, str]
    gpus: int
    index: int = -1

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kubelet": self.kubelet,
            "labels": self.labels,
            "gpus": self.gpus,
            "index": self.index,
        }


def cluster_nodes(inventory: Inventory, workers: int) -> list[ClusterNode]:
    """The inventory's named nodes, then `workers` plain API-only workers (worker-1...).

    Selector entries name no node: they only decide what the plugin publishes on matching nodes.
    """
    named = [e for e in inventory.nodes if e.name]
    nodes: list[ClusterNode] = []
    kubelets = 0
    for entry in named:
        assert entry.name is not None
        nodes.append(
            ClusterNode(
                entry.name,
                entry.kubelet,
                dict(entry.labels),
                entry.gpu_count,
                kubelets if entry.kubelet else -1,
            )
        )
        kubelets += entry.kubelet
    taken = {n.name for n in nodes}
    for i in range(1, workers + 1):
        name = f"worker-{i}"
        if name in taken:
            raise ClusterError(
                f"{inventory.source}: node {name} clashes with the extra worker of the same name"
            )
        nodes.append(ClusterNode(name, False, {}, 0))
    if not nodes:
        raise ClusterError(
            f"{inventory.source}: no named nodes and no --workers: the cluster would have no nodes"
        )
    return nodes


@dataclass
class _State:
    """cluster.json: everything `down`, `status` and restarts need, written after every change."""

    inventory: str
    server: str
    feature_gates: dict[str, bool]
    plugin: bool
    ports: dict[str, int]
    nodes: list[ClusterNode]
    kubelet_ports: dict[str, dict[str, int]] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    plugin_args: list[str] = field(default_factory=list)  # extra `fakeplugin serve` flags, e.g. feature gates

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
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _State:
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
        )


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    pid: int
    running: bool
    rss_bytes: int
    log: str


class Cluster:
    """Handle on a local cluster's state dir. Start one with Cluster.up(), attach with Cluster(state_dir)."""

    def __init__(self, state_dir: Path = DEFAULT_STATE_DIR) -> None:
        self.layout = StateLayout(Path(state_dir).absolute())
        self._state: _State | None = None
        self._popen: dict[int, subprocess.Popen[bytes]] = {}  # children of this process, reaped on stop
        if self.layout.cluster_file.exists():
            self._state = _State.from_json(json.loads(self.layout.cluster_file.read_text()))

    # ---- starting -------------------------------------------------------------------------------

    @classmethod
    def up(
        cls,
        inventory: Path,
        state_dir: Path = DEFAULT_STATE_DIR,
        *,
        feature_gates: dict[str, bool] | None = None,
        plugin: bool = True,
        workers: int = 0,
        build: bool = False,
        plugin_args: Sequence[str] = (),
    ) -> Cluster:
        """Start a cluster for `inventory`; returns when every node is Ready (and every GPU node's
        plugin has published its slices). On failure everything started is stopped again (logs stay)."""
        cluster = cls(state_dir)
        cluster.layout.root.mkdir(parents=True, exist_ok=True)
        with cluster._locked():
            cluster._refuse_if_running()
            started = time.monotonic()
            try:
                cluster._start(
                    Path(inventory).absolute(),
                    dict(components.DEFAULT_FEATURE_GATES) if feature_gates is None else feature_gates,
                    plugin,
                    workers,
                    build,
                    plugin_args,
                )
            except BaseException:
                if cluster._state and cluster._state.processes:
                    log.error("cluster up failed; stopping what it started (logs in %s)", cluster.layout.logs)
                cluster._stop_all()
                cluster._remove_runtime_state(purge=False)
                raise
        log.info("cluster up in %.0f s; kubeconfig: %s", time.monotonic() - started, cluster.kubeconfig)
        return cluster

    def _refuse_if_running(self) -> None:
        """Refuse while a cluster runs here; else clear what an earlier one left, logs included."""
        if self._state is None:
            self._remove_runtime_state(purge=True)
            return
        alive = [p for p in self._state.processes if is_running(p)]
        if alive:
            raise ClusterError(
                f"a cluster is already running in {self.layout.root} ("
                + ", ".join(f"{p.name} pid {p.pid}" for p in alive)
                + f"); stop it first: fakeplugin cluster down --state-dir {self.layout.root}"
            )
        log.info("removing the state of a cluster that is no longer running in %s", self.layout.root)
        self._remove_runtime_state(purge=True)
        self._state = None

    def _start(
        self,
        inventory_path: Path,
        gates: dict[str, bool],
        plugin: bool,
        workers: int,
        build: bool,
        plugin_args: Sequence[str],
    ) -> None:
        inventory = load_inventory(inventory_path)
        nodes = cluster_nodes(inventory, workers)
        kubelet_nodes = [n for n in nodes if n.kubelet]
        self._check_host(kubelet_nodes)
        bins = self._binaries(build)
        ports = _free_ports(5 + 2 * len(kubelet_nodes))
        cp = Ports(*ports[:5])
        self._state = _State(
            inventory=str(inventory_path),
            server=f"https://{components.LOOPBACK}:{cp.apiserver}",
            feature_gates=gates,
            plugin=plugin,
            plugin_args=list(plugin_args),
            ports={
                "etcdClient": cp.etcd_client,
                "etcdPeer": cp.etcd_peer,
                "apiserver": cp.apiserver,
                "scheduler": cp.scheduler,
                "controllerManager": cp.controller_manager,
            },
            nodes=nodes,
            kubelet_ports={
                n.name: {"kubelet": ports[5 + 2 * i], "healthz": ports[6 + 2 * i]}
                for i, n in enumerate(kubelet_nodes)
            },
        )
        self._save()
        self._make_credentials(self._state.server)
        self._start_control_plane(bins, cp, gates)
        self._register_api_nodes([n for n in nodes if not n.kubelet])
        for node in kubelet_nodes:
            self._start_node(bins, node, gates)
        self._wait_nodes_ready(kubelet_nodes)
        if plugin and kubelet_nodes:
            self.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": device_classes(DEFAULT_DRIVER_NAME)}
                ),
            )
            log.info("DeviceClasses of %s created (as NVIDIA's chart does)", DEFAULT_DRIVER_NAME)
            for node in kubelet_nodes:
                self._start_plugin(node)
            self._wait_slices(inventory, kubelet_nodes)

    def _check_host(self, kubelet_nodes: list[ClusterNode]) -> None:
        if not shutil.which("openssl"):
            raise ClusterError("openssl not found in PATH (it makes the service-account key pair)")
        if not kubelet_nodes:
            return
        if os.geteuid() != 0:
            raise ClusterError(
                "kubelet nodes need root (private mount namespaces, bind mounts); "
                "run as root or mark the nodes `kubelet: false` in the inventory"
            )
        for tool in ("unshare", "mount"):
            if not shutil.which(tool):
                raise ClusterError(f"{tool} not found in PATH (needed for kubelet nodes)")
        for hidden in (Path("/var/lib"), Path("/var/log")):
            if self.layout.root.is_relative_to(hidden):
                raise ClusterError(
                    f"state dir {self.layout.root} is under {hidden}, which the kubelet sees "
                    "replaced by a per-node dir; choose another --state-dir"
                )
        long = too_long_sockets([self.node_dirs_of(n) for n in kubelet_nodes])
        if long:
            raise ClusterError(
                "unix socket paths would exceed 107 bytes; use a shorter --state-dir:\n  " + "\n  ".join(long)
            )

    def _binaries(self, build: bool) -> dict[str, Path]:
        try:
            found = binaries.find_all()
        except binaries.BinaryNotFound:
            if not build:
                raise
            log.info("building missing binaries with %s", binaries.BUILD_SCRIPT)
            if binaries.build(list(binaries.CLUSTER_BINARIES)) != 0:
                raise ClusterError(f"{binaries.BUILD_SCRIPT} failed (its output is above)") from None
            found = binaries.find_all()
        for name, path in found.items():
            log.info("using %s: %s", name, path)
        return found

    def _make_credentials(self, server: str) -> None:
        """Admin token (token file + kubeconfig) and the service-account key pair."""
        pki = self.layout.pki
        pki.mkdir(parents=True, exist_ok=True)
        token = secrets.token_urlsafe(32)
        write_atomic(self.layout.token_file, components.token_file(token).encode(), mode=0o600)
        kubeconfig = yaml.safe_dump(components.kubeconfig(server, token))
        write_atomic(self.layout.kubeconfig, kubeconfig.encode(), mode=0o600)
        log.info("generating the service-account key pair in %s (openssl)", pki)
        for argv in (
            ["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"],
            ["openssl", "rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
        ):
            result = subprocess.run(argv, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")

    def _start_control_plane(self, bins: dict[str, Path], cp: Ports, gates: dict[str, bool]) -> None:
        lay = self.layout
        self._launch("etcd", [components.etcd_argv(bins["etcd"], lay, cp)])
        self._wait_http("etcd", f"http://{components.LOOPBACK}:{cp.etcd_client}/health")
        self._launch("kube-apiserver", [components.apiserver_argv(bins["kube-apiserver"], lay, cp, gates)])
        self._wait(
            "kube-apiserver", lambda: self.kubectl("get", "--raw", "/readyz", check=False).returncode == 0
        )
        self._launch("kube-scheduler", [components.scheduler_argv(bins["kube-scheduler"], lay, cp, gates)])
        self._launch(
            "kube-controller-manager",
            [components.controller_manager_argv(bins["kube-controller-manager"], lay, cp, gates)],
        )
        self._wait_http("kube-scheduler", f"https://{components.LOOPBACK}:{cp.scheduler}/healthz")
        self._wait_http(
            "kube-controller-manager", f"https://{components.LOOPBACK}:{cp.controller_manager}/healthz"
        )

    def _register_api_nodes(self, nodes: list[ClusterNode]) -> None:
        if not nodes:
            return
        objs = [components.api_node(n.name, n.labels, binaries.K8S_VERSION) for n in nodes]
        self.kubectl(
            "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
        )
        log.info("API-only nodes registered: %s", ", ".join(n.name for n in nodes))

    def _start_node(self, bins: dict[str, Path], node: ClusterNode, gates: dict[str, bool]) -> None:
        dirs = self.node_dirs_of(node)
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
        kp = self._kubelet_ports(node.name)
        config = components.kubelet_config(dirs, kp, gates)
        write_atomic(dirs.kubelet_config, yaml.safe_dump(config, sort_keys=False).encode(), mode=0o644)
        self._launch(f"fakecri/{node.name}", [components.fakecri_argv(bins["fakecri"], dirs)])
        self._wait(f"fakecri/{node.name}", dirs.cri_socket.exists)
        self._start_kubelet(node)

    def _start_kubelet(self, node: ClusterNode) -> None:
        dirs = self.node_dirs_of(node)
        argv = components.kubelet_argv(binaries.find("kubelet"), self.layout, dirs)
        unshare, sh = shutil.which("unshare"), shutil.which("sh")
        assert unshare and sh
        self._launch(f"kubelet/{node.name}", components.isolated_argvs(unshare, sh, dirs, argv))
        self._wait_http(
            f"kubelet/{node.name}",
            f"http://{components.LOOPBACK}:{self._kubelet_ports(node.name).healthz}/healthz",
        )

    def _start_plugin(self, node: ClusterNode) -> None:
        assert self._state is not None
        dirs = self.node_dirs_of(node)
        argv = components.plugin_argv(
            sys.executable, Path(self._state.inventory), self.layout, dirs, self._state.plugin_args
        )
        # The package may be used from a source tree, not installed: let the child import it the same way.
        source = str(Path(fakeplugin.__file__).resolve().parents[1])
        env = {
            **{k: v for k, v in os.environ.items() if k != "FEATURE_GATES"},  # gates come from our state only
            "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])),
        }
        self._launch(f"plugin/{node.name}", [argv], env=env)

    def _wait_nodes_ready(self, kubelet_nodes: list[ClusterNode]) -> None:
        assert self._state is not None
        names = {n.name for n in self._state.nodes}
        watch = [p for p in self._state.processes if p.name.startswith(("kubelet/", "fakecri/"))]

        def registered() -> bool:
            return {n.name for n in kubelet_nodes} <= set(self._node_conditions())

        if kubelet_nodes:
            self._wait("the kubelets to register their nodes", registered, watch)
        for node in kubelet_nodes:
            # The kubelet refuses a loopback --node-ip as the node's address ("nodeIP can't be loopback
            # address") and leaves the addresses empty; it never overwrites them once set.
            addresses = {"status": {"addresses": components.node_addresses(node.name)}}
            self.kubectl(
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
                self.kubectl("label", "node", node.name, "--overwrite", *pairs)
                log.info("node %s labelled %s", node.name, ", ".join(pairs))
        self._wait(
            "all nodes to be Ready",
            lambda: {n for n, ready in self._node_conditions().items() if ready} >= names,
            watch,
        )

    def _node_conditions(self) -> dict[str, bool]:
        """Node name -> Ready condition is True."""
        out = self.kubectl("get", "nodes", "-o", "json", check=False)
        if out.returncode != 0:
            return {}
        return {
            item["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in item.get("status", {}).get("conditions", [])
            )
            for item in json.loads(out.stdout)["items"]
        }

    def _wait_slices(self, inventory: Inventory, kubelet_nodes: list[ClusterNode]) -> None:
        """Each kubelet node whose inventory entry has GPUs: wait for its plugin's ResourceSlices."""
        expected = {
            n.name for n in kubelet_nodes if (e := inventory.node_entry(n.name, n.labels)) and e.gpu_count
        }
        assert self._state is not None
        watch = [p for p in self._state.processes if p.name.startswith(("plugin/", "kubelet/"))]

        def published() -> bool:
            out = self.kubectl("get", "resourceslices", "-o", "json", check=False)
            if out.returncode != 0:
                return False
            seen = {
                s["spec"].get("nodeName")
                for s in json.loads(out.stdout)["items"]
                if s["spec"]["driver"] == DEFAULT_DRIVER_NAME
            }
            return expected <= seen

        if expected:
            self._wait(f"the plugins' ResourceSlices of {', '.join(sorted(expected))}", published, watch)
        # Slices alone are not enough: a pod the scheduler places before the kubelet registered the plugin
        # fails with "DRA driver ... is not registered" and is retried only at the next pod sync.
        for node in kubelet_nodes:
            self._wait_registered(node.name, before=0)

    def _registrations(self, node: str) -> int:
        path = self.layout.log(f"plugin/{node}")
        return path.read_text(errors="replace").count(REGISTERED_LOG) if path.exists() else 0

    def _wait_registered(self, node: str, before: int) -> None:
        """Wait until the node's plugin log shows a kubelet registration beyond the `before` earlier ones."""
        self._wait(
            f"the kubelet of {node} to register its plugin",
            lambda: self._registrations(node) > before,
            [self._record(f"plugin/{node}"), self._record(f"kubelet/{node}")],
        )

    # ---- processes ------------------------------------------------------------------------------

    def _launch(self, name: str, argvs: list[list[str]], env: dict[str, str] | None = None) -> ProcessRecord:
        assert self._state is not None
        log.info("starting %s", name)
        record, proc = spawn(name, argvs, self.layout.log(name), self.layout.root, env=env)
        self._popen[record.pid] = proc
        self._state.processes = [p for p in self._state.processes if p.name != name] + [record]
        self._save()
        return record

    def _record(self, name: str) -> ProcessRecord:
        assert self._state is not None
        for p in self._state.processes:
            if p.name == name:
                return p
        raise ClusterError(f"no process {name} in {self.layout.cluster_file}")

    def _stop(self, record: ProcessRecord) -> None:
        outcome = stop(record, self._popen.pop(record.pid, None))
        log.info("%s (pid %d): %s", record.name, record.pid, outcome)

    def _stop_all(self) -> None:
        if self._state is None:
            return
        rank = {
            p.name: next(i for i, prefix in enumerate(STOP_ORDER) if p.name.startswith(prefix))
            for p in self._state.processes
        }
        for record in sorted(self._state.processes, key=lambda p: rank[p.name]):
            self._stop(record)

    def _wait(
        self,
        what: str,
        ready: Callable[[], bool],
        watch: list[ProcessRecord] | None = None,
        timeout: float = START_TIMEOUT,
    ) -> None:
        """Poll `ready`; fail early, with its log's tail, when a watched process (default: `what`) exits."""
        watched = watch if watch is not None else [self._record(what)]
        started = time.monotonic()
        while not ready():
            for record in watched:
                if not is_running(record):
                    raise ClusterError(
                        f"{record.name} exited while waiting for {what}; "
                        f"last lines of {record.log}:\n{_tail(Path(record.log))}"
                    )
            if time.monotonic() - started > timeout:
                raise ClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}; logs in {self.layout.logs}"
                )
            time.sleep(POLL_SECONDS)
        log.info("waited %.1f s for %s", time.monotonic() - started, what)

    def _wait_http(self, name: str, url: str) -> None:
        self._wait(name, lambda: _http_ok(url))

    # ---- state ----------------------------------------------------------------------------------

    def _save(self) -> None:
        assert self._state is not None
        write_atomic(
            self.layout.cluster_file, json.dumps(self._state.to_json(), indent=2).encode(), mode=0o644
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self.layout.lock_file.open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ClusterError(f"another `cluster up/down` is working on {self.layout.root}") from None
            yield

    def _remove_runtime_state(self, purge: bool) -> None:
        mounts = _mounts_under(self.layout.root)
        if mounts:  # never recurse through a mount (a kubelet namespace leaking would show here)
            raise ClusterError(f"not removing {self.layout.root}: mounts below it: {', '.join(mounts)}")
        users = processes_of(self.layout.root)
        if users:  # started for this state dir but not recognised as recorded: never signalled, so refuse
            raise ClusterError(
                f"not removing {self.layout.root}: processes started for it but not (or no longer) recorded "
                "in cluster.json still run; stop them yourself:\n  "
                + "\n  ".join(f"pid {pid}: {cmd}" for pid, cmd in users)
            )
        for path in self.layout.runtime_entries() + ([self.layout.logs] if purge else []):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    # ---- the API for tests and commands -----------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.layout.kubeconfig

    def down(self, purge: bool = False) -> None:
        """Stop every process this cluster started (only those: pid + command line must match), then
        remove the runtime state; logs stay unless `purge`."""
        self.layout.root.mkdir(parents=True, exist_ok=True)
        with self._locked():
            if self._state is None:
                log.info("no cluster state in %s; nothing to stop", self.layout.root)
            self._stop_all()
            self._remove_runtime_state(purge)
            self._state = None
        log.info(
            "cluster in %s is down%s", self.layout.root, "" if purge else f"; logs kept in {self.layout.logs}"
        )

    def status(self) -> list[ProcessStatus]:
        return [
            ProcessStatus(p.name, p.pid, is_running(p), rss_bytes(p.pid) if is_running(p) else 0, p.log)
            for p in self._require().processes
        ]

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with `check`, a failure raises ClusterError with its stderr."""
        argv = [
            str(binaries.find("kubectl")),
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.layout.kubectl_cache}",
            *args,
        ]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def node_dirs(self, node: str) -> NodeDirs:
        """Files of a kubelet node (kubelet root, CDI dir, fake CRI records, ...)."""
        for n in self._require().nodes:
            if n.name == node:
                if not n.kubelet:
                    raise ClusterError(f"node {node} is API-only: it has no kubelet and no node dirs")
                return self.node_dirs_of(n)
        raise ClusterError(f"no node {node} in this cluster")

    def node_dirs_of(self, node: ClusterNode) -> NodeDirs:
        return self.layout.node(node.name, node.index)

    def container_record(self, namespace: str, pod: str, container: str) -> dict[str, Any]:
        """What the fake CRI got and resolved for a container (newest record if on several nodes)."""
        name = f"{namespace}_{pod}_{container}.json"
        found = [self.node_dirs_of(n).containers_dir / name for n in self._require().nodes if n.kubelet]
        found = [p for p in found if p.exists()]
        if not found:
            raise FileNotFoundError(f"no fake CRI record {name} on any kubelet node of {self.layout.root}")
        return json.loads(max(found, key=lambda p: p.stat().st_mtime_ns).read_text())

    def run_in_container_view(
        self, namespace: str, pod: str, container: str, script: str, *args: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell script of the container's as a workload there would see it.

        No real container exists: the fake CRI's record (CDI resolved by the real library) is
        replayed under a temporary root, every mount copied to its container path, and `script` (a
        container path such as /usr/bin/nvidia-smi) runs there with /bin/sh and the container's env.
        """
        record = self.container_record(namespace, pod, container)
        with tempfile.TemporaryDirectory(prefix="fpview-") as tmp:
            root = Path(tmp)
            for mount in record["mounts"]:
                source, target = Path(mount["source"]), root / mount["destination"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if source.is_dir():
                    shutil.copytree(source, target, symlinks=True)
                else:
                    shutil.copy2(source, target)
            env = dict(item.split("=", 1) for item in record["env"])
            env.update({"PATH": "/usr/bin:/bin", smi.TEST_ROOT_ENV: str(root)})
            return subprocess.run(
                ["/bin/sh", str(root / script.lstrip("/")), *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )

    def restart_kubelet(self, node: str) -> None:
        """Stop and start a node's kubelet (same config, same root dir); returns once it is healthy."""
        n = self._kubelet_node(node)
        self._stop(self._record(f"kubelet/{node}"))
        self._start_kubelet(n)

    def restart_plugin(self, node: str, *, args: Sequence[str] | None = None) -> None:
        """Stop and start a node's plugin; returns once the kubelet has registered it again.

        args, when given, become the plugins' extra `fakeplugin serve` flags from now on."""
        n = self._kubelet_node(node)
        if args is not None:
            self._require().plugin_args = list(args)
            self._save()
        before = self._registrations(node)
        self._stop(self._record(f"plugin/{node}"))
        self._start_plugin(n)
        self._wait_registered(node, before)

    def _kubelet_node(self, node: str) -> ClusterNode:
        self.node_dirs(node)  # raises for unknown or API-only nodes
        return next(n for n in self._require().nodes if n.name == node)

    def _kubelet_ports(self, node: str) -> KubeletPorts:
        ports = self._require().kubelet_ports[node]
        return KubeletPorts(kubelet=ports["kubelet"], healthz=ports["healthz"])

    def _require(self) -> _State:
        if self._state is None:
            raise ClusterError(f"no cluster in {self.layout.root} (start one with `fakeplugin cluster up`)")
        return self._state


def _free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all bound at once, then released for the components to take)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in socks:
            s.bind((components.LOOPBACK, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Components serve self-signed certificates on loopback; proxies from the environment never apply.
_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE
_OPENER = urllib.request.build_opener(
    urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=_INSECURE)
)


def _http_ok(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve())
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]
