"""The kind e2e's cluster (tests/kind): made by `demo/kind/run.sh --local --keep --release DIR` from a release
of this commit (`hack/release.sh --local`): its packaged chart, its image archive loaded into the nodes.

`KindCluster` runs kubectl, helm, docker and hack/kind/kind against it; the names are those run.sh and the
chart give it (the chart's namespace and DaemonSet, the release's image).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeplugin
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.testing import container, pod
from tests.harness.kube import wait_for
from tests.harness.paths import REPO

KIND = REPO / "hack" / "kind" / "kind"
CLUSTER = "fakeplugin-e2e"
NAMESPACE = "nvidia-dra-driver-gpu"
# The release's image (hack/release.sh --image-repository), which its packaged chart runs.
IMAGE_REPOSITORY = "fakeplugin.local/fakeplugin"
IMAGE = f"{IMAGE_REPOSITORY}:{fakeplugin.__version__}"
DAEMONSET = "fakeplugin-kubelet-plugin"
# The release's image with nvidia-ml-py and tests/harness/nvml_probe.py (tests/kind/conftest.py).
NVML_WORKLOAD = f"{IMAGE_REPOSITORY}:nvml-workload"


@dataclass
class KindCluster:
    """The session's kind cluster: kubectl on it, docker on its nodes, what run.sh printed, the release's
    packaged chart it runs and the commit that release was made from."""

    kubeconfig: Path
    env: dict[str, str]
    demo_output: str
    chart: Path
    commit: str
    kubectl: Kubectl = field(init=False)

    def __post_init__(self) -> None:
        self.kubectl = Kubectl(self.kubeconfig)

    def run(self, *argv: str, input: str | None = None, timeout: float = 300) -> str:
        """A command (docker, helm, hack/kind/kind) against this cluster; its stdout, or fail with stderr."""
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, env=self.env, cwd=REPO
        )
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return result.stdout

    def node_exec(self, node: str, *argv: str) -> str:
        """A command on a kind node (its container)."""
        return self.run("docker", "exec", node, *argv)

    def gpu_nodes(self) -> list[str]:
        nodes = self.get("nodes", "-l", "nvidia.com/dra-kubelet-plugin=true")["items"]
        return sorted(n["metadata"]["name"] for n in nodes)

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def helm(self, *args: str) -> str:
        return self.run("helm", f"--kubeconfig={self.kubeconfig}", *args)

    def upgrade_chart(self, *values: str) -> None:
        """`helm upgrade` of the chart's release to the release's packaged chart: the values it has, `values`
        (helm's --set… flags) on top."""
        self.helm(
            "upgrade",
            "fakeplugin",
            str(self.chart),
            "-n",
            NAMESPACE,
            "--reuse-values",
            *values,
            "--wait",
            "--timeout=5m",
        )

    def plugins_rolled_out(self) -> None:
        """Wait until every plugin pod of the DaemonSet runs its current template."""
        self.kubectl(
            "rollout", "status", "-n", NAMESPACE, f"daemonset/{DAEMONSET}", "--timeout=300s", timeout=320
        )

    def logs(self, namespace: str, pod: str, container: str) -> str:
        return self.kubectl("logs", "-n", namespace, pod, "-c", container).stdout


# Workloads in the kind e2e: pods that print, then hold their claim.
WORKLOAD = "fakeplugin.local/debian:bookworm"  # loaded into the nodes by run.sh --local
SLEEP = "trap 'exit 0' TERM; while true; do sleep 600 & wait; done"
END = "=== end of output ==="


def script_pod(
    name: str,
    claim_name: str,
    containers: dict[str, tuple[str, list[str] | None]],
    image: str = WORKLOAD,
    **spec: Any,
) -> dict[str, Any]:
    """A pod using claim `claim_name`; containers: name -> (shell script, requests it uses; None: all, []:
    none, a container without the claim).
    Each script ends printing END, then sleeps: the pod keeps its claim while the test reads its output."""
    return pod(
        name,
        [
            container(
                ctr,
                claims=["gpu"] if requests is None else [("gpu", r) for r in requests],
                image=image,
                command=["sh", "-c", f"{script}; echo '{END}'; {SLEEP}"],
                imagePullPolicy="IfNotPresent",
            )
            for ctr, (script, requests) in containers.items()
        ],
        claims={"gpu": {"resourceClaimName": claim_name}},
        restart_policy=None,
        grace_period_s=2,
        **spec,
    )


def send(kind: KindCluster, namespace: str, *objects: dict[str, Any]) -> None:
    kind.kubectl.send(
        "apply", [{**o, "metadata": {**o["metadata"], "namespace": namespace}} for o in objects]
    )


def wait_ready(kind: KindCluster, namespace: str, name: str) -> dict[str, Any]:
    kind.kubectl(
        "wait", "-n", namespace, f"pod/{name}", "--for=condition=Ready", "--timeout=180s", timeout=200
    )
    return kind.get("pod", "-n", namespace, name)


def output(kind: KindCluster, namespace: str, name: str, container: str = "ctr") -> str:
    """What a container printed, once it printed END (it then sleeps on: the pod keeps its claim)."""

    def done() -> str | None:
        result = kind.kubectl("logs", "-n", namespace, name, "-c", container, check=False)
        return result.stdout if END in result.stdout else None

    return wait_for(done, what=f"{namespace}/{name}/{container} to print its output", timeout=180)


def env_of(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if re.match(r"^[A-Z_][A-Z0-9_]*=", line))


T10 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"
A5000 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA RTX A5000'"
SHOW = "env | sort; nvidia-smi -L"


def plugin_pods(kind: KindCluster) -> list[dict[str, Any]]:
    return kind.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=kubelet-plugin")["items"]


def cdi_files(kind: KindCluster, node: str) -> list[str]:
    return sorted(kind.node_exec(node, "ls", "/var/run/cdi").split())


def registered(kind: KindCluster, node: str) -> list[str]:
    """The kubelet plugin registration sockets of gpu.nvidia.com on a node."""
    names = kind.node_exec(node, "ls", "/var/lib/kubelet/plugins_registry").split()
    return sorted(n for n in names if n.startswith("gpu.nvidia.com"))


def allocated_uuids(kind: KindCluster, namespace: str, claim_name: str) -> dict[str, str]:
    """request name -> UUID of the device allocated for it (one device per request)."""
    results = kind.get("resourceclaim", "-n", namespace, claim_name)["status"]["allocation"]["devices"][
        "results"
    ]
    slices = kind.get("resourceslices")["items"]
    uuid = {
        (s["spec"]["pool"]["name"], d["name"]): d["attributes"]["uuid"]["string"]
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"].get("devices", [])
    }
    return {r["request"]: uuid[(r["pool"], r["device"])] for r in results}


def smi_uuids(log: str) -> list[str]:
    """The UUIDs of the GPUs `nvidia-smi -L` listed."""
    return re.findall(r"^GPU \d+: .* \(UUID: (GPU-[0-9a-f-]+)\)$", log, re.M)
