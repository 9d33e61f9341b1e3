"""FakepluginCluster: one cluster for tests, started here (a local cluster) or attached to (any cluster
running our plugin, e.g. kind with the chart), with the helpers tests need. See docs/testing.md."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from fakeplugin import DEFAULT_DRIVER_NAME
from fakeplugin.cdi import cdi_device_id
from fakeplugin.cluster import DEFAULT_STATE_DIR, BinaryNotFound, Cluster, KubeletDirs, binaries
from fakeplugin.cluster.karpenter import KarpenterRequest
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.kueue import KueueRequest
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.prometheus import PrometheusRequest
from fakeplugin.server.calllog import read_calls
from fakeplugin.testing import containers, objects
from fakeplugin.testing.containers import ContainerView
from fakeplugin.testing.faults import Faults
from fakeplugin.testing.objects import Allocated

Objects = str | Mapping[str, Any] | Iterable[Mapping[str, Any]]
TERMINAL_PHASES = ("Succeeded", "Failed")


class FakepluginUnavailable(RuntimeError):
    """What was asked needs a local cluster's files (records, call logs), and this cluster has none."""


class PodTimeout(TimeoutError):
    """A pod did not reach the phase waited for; the message shows its status and events."""


class FakepluginCluster:
    """A cluster with our plugin. `start()` runs a local one (and `close()` stops it); `attach()` uses a
    running one and never starts or stops anything. A context manager: `with FakepluginCluster.start():`.

    On a local cluster (started, or attached with its state dir) `local` is its fakeplugin.cluster.Cluster
    and the inspection calls (`container`, `calls`, `node_dirs`, restarts, ...) use its files."""

    def __init__(self, kubeconfig: Path, *, local: Cluster | None = None, owned: bool = False) -> None:
        self._kubeconfig = Path(kubeconfig)
        self._local = local
        self._owned = owned
        self._kubectl_binary: Path | None = None
        self._kubectl = Kubectl(self._kubeconfig, binary=self._kubectl_path)
        self.faults = Faults(self.kubectl)

    # ---- starting, attaching, stopping --------------------------------------------------------------

    @classmethod
    def start(
        cls,
        inventory: Path | None = None,
        state_dir: Path | None = None,
        *,
        simulated_nodes: int = 0,
        plugin_args: Sequence[str] = (),
        feature_gates: Mapping[str, bool] | None = None,
        build: bool = False,
        kubernetes_version: str | None = None,
        kueue: KueueRequest | None = None,
        prometheus: PrometheusRequest | None = None,
        karpenter: KarpenterRequest | None = None,
    ) -> FakepluginCluster:
        """Start a local cluster (fakeplugin.cluster.Cluster.up) for `inventory` (default: the seed lab)
        in `state_dir` (default: the user's cache, ~/.cache/fakeplugin/cluster), of Kubernetes
        `kubernetes_version` (default: $FAKEPLUGIN_K8S_VERSION, else v1.37.2); `kueue`
        (fakeplugin.cluster.kueue.request): real Kueue too; `prometheus`
        (fakeplugin.cluster.prometheus.request): Prometheus on the plugins' telemetry (its URL:
        `local.prometheus_url`); `karpenter` (fakeplugin.cluster.karpenter.request): Karpenter launching
        nodes of the inventory's instanceType entries."""
        local = Cluster.up(
            inventory or seed_lab_inventory(),
            state_dir or DEFAULT_STATE_DIR,
            simulated_nodes=simulated_nodes,
            plugin_args=plugin_args,
            feature_gates=None if feature_gates is None else dict(feature_gates),
            build=build,
            kubernetes_version=kubernetes_version,
            kueue=kueue,
            prometheus=prometheus,
            karpenter=karpenter,
            watchdog=True,  # down with this process, however it ends
        )
        return cls(local.kubeconfig, local=local, owned=True)

    @classmethod
    def attach(cls, kubeconfig: Path, *, state_dir: Path | None = None) -> FakepluginCluster:
        """Use the running cluster of `kubeconfig`; `state_dir`: a local cluster's, for its files."""
        local = None
        if state_dir is not None:
            local = Cluster(Path(state_dir))
            local.nodes()  # a state dir without a cluster fails here, not in the first test using it
        return cls(Path(kubeconfig), local=local)

    def close(self) -> None:
        """Stop the cluster if `start()` started it (its logs stay in the state dir); else nothing."""
        if self._owned and self._local is not None:
            self._local.down()
            self._owned = False

    def __enter__(self) -> FakepluginCluster:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- any cluster -------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against the cluster; with `check`, a failure raises ClusterError with its stderr."""
        if self._local is not None and self._local.kubeconfig == self._kubeconfig:
            return self._local.kubectl(*args, input=input, check=check, timeout=timeout)
        return self._kubectl(*args, input=input, check=check, timeout=timeout)

    def apply(self, objs: Objects, namespace: str | None = None) -> list[dict[str, Any]]:
        """`kubectl apply` YAML text (any number of documents) or dicts; returns the objects sent."""
        found = objects.as_objects(objs)
        self.kubectl("apply", "-f", "-", *_in(namespace), input=objects.as_list(found))
        return found

    def delete(self, objs: Objects, namespace: str | None = None, *, wait: bool = True) -> None:
        """`kubectl delete` the objects (missing ones are fine); with `wait`, until they are gone."""
        found = objects.as_objects(objs)
        args = ["delete", "--ignore-not-found", f"--wait={str(wait).lower()}", "-f", "-", *_in(namespace)]
        self.kubectl(*args, input=objects.as_list(found), timeout=180)

    def get(self, kind: str, name: str | None = None, namespace: str | None = None) -> dict[str, Any]:
        """One object (or, without `name`, a List of them) as the API server has it."""
        args = ["get", kind, *([name] if name else []), *_in(namespace), "-o", "json"]
        return json.loads(self.kubectl(*args).stdout)

    def create_namespace(self, prefix: str = "t") -> str:
        """A fresh namespace `<prefix>-<8 hex>`."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", name)
        return name

    def delete_namespace(self, name: str) -> None:
        """Delete a namespace and all in it, without waiting."""
        self.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")

    def wait_for_pod(
        self, namespace: str, name: str, phase: str = "Running", *, timeout: float = 120.0
    ) -> dict[str, Any]:
        """Wait until the pod is in `phase`; returns it. PodTimeout (with the pod's status and events)
        after `timeout` seconds, or at once when it ended in another phase."""
        deadline = time.monotonic() + timeout
        while True:
            pod = self.kubectl("get", "pod", name, "-n", namespace, "-o", "json", check=False)
            found = json.loads(pod.stdout) if pod.returncode == 0 else None
            current = (found or {}).get("status", {}).get("phase", "")
            if current == phase:
                assert found is not None
                return found
            ended = current in TERMINAL_PHASES
            if ended or time.monotonic() > deadline:
                why = f"ended in phase {current}" if ended else f"timed out after {timeout:.0f}s"
                raise PodTimeout(
                    f"pod {namespace}/{name} {why} waiting for phase {phase}\n"
                    + _pod_status(found, pod.stderr)
                    + f"events:\n{objects.describe_events(self.events(namespace, f'pod/{name}'))}"
                )
            time.sleep(0.5)

    def events(self, namespace: str, obj: str | Mapping[str, Any]) -> list[dict[str, Any]]:
        """Events about `obj` ("pod/name", "resourceclaim/name", or the object), oldest first."""
        kind, name = objects.object_ref(obj)
        listed = self.kubectl(
            "get", "events", "-n", namespace, f"--field-selector=involvedObject.name={name}", "-o", "json"
        )
        found = [
            e
            for e in json.loads(listed.stdout)["items"]
            if e["involvedObject"]["kind"].lower() == kind.lower()
        ]
        return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")

    def allocation(self, namespace: str, claim: str) -> list[Allocated]:
        """(node, pool, device, request) of each device allocated to the claim; [] while unallocated."""
        return objects.allocated(
            self.get("resourceclaim", claim, namespace), self.get("resourceslices")["items"]
        )

    def container(self, namespace: str, pod: str, container: str) -> ContainerView:
        """What the container received. Local cluster: the fake CRI's record; else the running container
        (`kubectl exec`), with its CDI devices derived from the pod's claims allocated by our driver."""
        if self._local is not None:
            return containers.local_view(self._local, namespace, pod, container)
        ids: list[str] = []
        for name, request in containers.container_claims(self.get("pod", pod, namespace), container):
            claim = self.get("resourceclaim", name, namespace)
            results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
            ids += [
                cdi_device_id(claim["metadata"]["uid"], r["device"], driver_name=DEFAULT_DRIVER_NAME)
                for r in results
                if r["driver"] == DEFAULT_DRIVER_NAME and request in ("", r["request"])
            ]
        return containers.exec_view(self.kubectl, namespace, pod, container, ids)

    def calls(
        self, node: str, claim: str | None = None, method: str | None = None, *, file: Path | None = None
    ) -> list[dict[str, Any]]:
        """The plugin's gRPC call log of `node` (see fakeplugin.server.calllog), oldest first: a local
        cluster's, or the copy in `file` (e.g. `kubectl cp` from a plugin pod of another cluster)."""
        if file is not None:
            return read_calls(Path(file), claim=claim, method=method)
        return self._require_local("calls").calls(node, claim=claim, method=method)

    # ---- a local cluster's files and processes ---------------------------------------------------------

    @property
    def local(self) -> Cluster:
        """The local cluster (fakeplugin.cluster.Cluster): everything it offers."""
        return self._require_local("the local cluster")

    @property
    def inventory(self) -> Path:
        """The inventory file the local cluster's plugins read (edits take effect within seconds)."""
        return self.local.inventory

    @property
    def layout(self) -> StateLayout:
        """The local cluster's files (fakeplugin.cluster.layout)."""
        return self.local.layout

    def node_dirs(self, node: str) -> KubeletDirs:
        """A kubelet node's files (CDI dir, kubelet root, fake CRI records, ...)."""
        return self.local.node_dirs(node)

    def container_record(self, namespace: str, pod: str, container: str) -> dict[str, Any]:
        """The fake CRI's raw record of a container (`container()` is its parsed view)."""
        return self.local.container_record(namespace, pod, container)

    def run_in_container_view(
        self, namespace: str, pod: str, container: str, script: str, *args: str
    ) -> subprocess.CompletedProcess[str]:
        """Run a script mounted into the container (a container path) in the container's view."""
        return self.local.run_in_container_view(namespace, pod, container, script, *args)

    def run_as_container(
        self, namespace: str, pod: str, container: str, command: str | Sequence[str], *, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a command of this host ("python3 my_probe.py" or an argv) as the container would run it:
        with the container's env (the host's below it, the host's PATH) and its NVML: `LD_LIBRARY_PATH`
        starts at a temporary directory holding a link `libnvidia-ml.so.1` to the library CDI mounted into
        the container, `FAKEPLUGIN_NVML_DESCRIPTION` names one holding links to the description files CDI
        mounted (so NVML lists exactly the container's GPUs). No chroot: the command sees the host's
        files, not the container's other mounts. Never raises for its exit status; local clusters only."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("empty command")
        local = self._require_local("run_as_container")
        return local.run_as_container(namespace, pod, container, argv, timeout=timeout)

    def restart_kubelet(self, node: str) -> None:
        """Stop and start a node's kubelet; returns once it is healthy."""
        self.local.restart_kubelet(node)

    def restart_plugin(self, node: str, *, args: Sequence[str] | None = None) -> None:
        """Stop and start a node's plugin (`args`: every plugin's extra flags from now on); returns once
        the kubelet registered it again."""
        self.local.restart_plugin(node, args=args)

    def _require_local(self, what: str) -> Cluster:
        if self._local is None:
            raise FakepluginUnavailable(
                f"{what}: needs a local cluster's state dir; this cluster was attached by kubeconfig "
                f"{self._kubeconfig} only (pass state_dir / --fakeplugin-state-dir for a local cluster)"
            )
        return self._local

    def _kubectl_path(self) -> Path:
        if self._kubectl_binary is None:
            try:
                version = self._local.kubernetes_version if self._local is not None else None
                self._kubectl_binary = binaries.find("kubectl", version=version)
            except BinaryNotFound:
                on_path = shutil.which("kubectl")
                if on_path is None:
                    raise
                self._kubectl_binary = Path(on_path)
        return self._kubectl_binary


def seed_lab_inventory() -> Path:
    """The seed lab's inventory shipped in the package (2 T10 on one node, 1 RTX A5000 on another)."""
    return Path(__file__).resolve().parents[1] / "examples" / "seed-lab.yaml"


def _in(namespace: str | None) -> list[str]:
    return ["-n", namespace] if namespace else []


def _pod_status(pod: dict[str, Any] | None, error: str) -> str:
    if pod is None:
        return f"pod not found: {error.strip()}\n"
    status = pod.get("status", {})
    lines = [f"phase: {status.get('phase', '(none)')}, node: {pod['spec'].get('nodeName', '(unscheduled)')}"]
    lines += [f"condition {c['type']}={c['status']}: {c.get('reason', '')} {c.get('message', '')}".rstrip()
              for c in status.get("conditions", []) if c["status"] != "True"]  # fmt: skip
    for c in status.get("containerStatuses", []):
        for state, detail in c.get("state", {}).items():
            lines.append(
                f"container {c['name']}: {state} {detail.get('reason', '')} {detail.get('message', '')}"
            )
    return "\n".join(lines) + "\n"
