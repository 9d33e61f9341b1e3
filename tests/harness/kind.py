"""The kind e2e's cluster (tests/kind): made by `demo/kind/run.sh --local --keep` with our image and chart.

`KindCluster` runs kubectl, helm, docker and hack/kind/kind against it; the names are those run.sh and the
chart give it (the chart's namespace and DaemonSet, our image's tag).
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin.cluster.kubectl import Kubectl
from tests.harness.paths import REPO

KIND = REPO / "hack" / "kind" / "kind"
CLUSTER = "fakeplugin-e2e"
NAMESPACE = "nvidia-dra-driver-gpu"
IMAGE = "fakeplugin:dev"
DAEMONSET = "fakeplugin-kubelet-plugin"


@dataclass
class KindCluster:
    """The session's kind cluster: kubectl on it, docker on its nodes, what run.sh printed."""

    kubeconfig: Path
    env: dict[str, str]
    demo_output: str
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
        """`helm upgrade` of the chart's release: the values it has, `values` (helm's --set… flags) on top."""
        self.helm(
            "upgrade",
            "fakeplugin",
            "charts/fakeplugin",
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
