"""Karpenter on a local cluster (`--with karpenter[=NODEPOOLS]`, docs/karpenter.md): its kwok provider with
GPU instance types (hack/karpenter/main.go, built from sigs.k8s.io/karpenter by hack/build-k8s.sh
--only karpenter), run on loopback against the cluster as its Deployment runs in one.

What `start` does, in order: the instance types file (`fakeplugin render --karpenter-instance-types` of
the cluster's inventory, with the fleet's own emulation flags, so the templates are what the fleet
publishes); the kwok provider's CRDs (kwok/charts/crds and kwok/apis/crds of its module); Karpenter
(process `karpenter`) in a network namespace of its own, joined to the cluster's loopback by a byte
relay (fakeplugin.cluster.bridge; process `karpenter-bridge` on the host side), because its metrics and
health listeners bind every interface (pkg/operator/operator.go: `fmt.Sprintf(":%d", port)`, no flag
for the host); then, once its health probe answers, the NodePools and KWOKNodeClasses of NODEPOOLS
(default examples/karpenter/nodepool.yaml).

The cluster's kwok manages the nodes Karpenter creates (annotation kwok.x-k8s.io/node=fake), and the
cluster's fleet serves them: their devices come from the inventory's instanceType entry of their
node.kubernetes.io/instance-type label.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import binaries, versions
from fakeplugin.cluster.bridge import bridge_argv, isolated_argvs
from fakeplugin.cluster.components import LOOPBACK, PREPARE_ONLY_FLAGS, fleet_flags, python_env
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.machine import found_or_built, free_ports
from fakeplugin.cluster.state import ClusterError, StateStore
from fakeplugin.cluster.supervisor import Supervisor

log = logging.getLogger("fakeplugin.cluster")

NAME = "karpenter"
BRIDGE = "karpenter-bridge"
DEFAULT_NODEPOOLS = Path(__file__).resolve().parents[1] / "examples" / "karpenter" / "nodepool.yaml"
# The API groups a NODEPOOLS file may hold objects of: Karpenter's own and its kwok provider's.
GROUPS = ("karpenter.sh/", "karpenter.kwok.sh/")


@dataclass(frozen=True)
class KarpenterRequest:
    """Karpenter as asked for, checked: its version, binary, CRDs and the objects of NODEPOOLS."""

    version: str
    binary: Path
    crds: Path
    nodepools: tuple[dict[str, Any], ...]


def request(nodepools: str = "", version: str | None = None, *, build: bool = False) -> KarpenterRequest:
    """Karpenter's binary for `version` (default: the table's; built first with `build`) and the objects of
    the file `nodepools` (default: examples/karpenter/nodepool.yaml), checked before anything starts."""
    objects = load_nodepools(Path(nodepools) if nodepools else DEFAULT_NODEPOOLS)
    chosen = version or versions.KARPENTER_VERSION
    binary, crds = found_or_built(
        f"Karpenter {chosen}",
        lambda: binaries.find_karpenter(chosen),
        build,
        lambda: binaries.build(["karpenter"]),
    )
    log.info("using Karpenter %s: %s", chosen, binary)
    return KarpenterRequest(chosen, binary, crds, tuple(objects))


def load_nodepools(path: Path) -> list[dict[str, Any]]:
    """The documents of a NODEPOOLS file: Karpenter objects (NodePool, KWOKNodeClass, NodeOverlay), each
    with a name; ClusterError naming the file and the document otherwise."""
    where = f"--with karpenter={path}"
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise ClusterError(f"{where}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ClusterError(f"{where}: not YAML: {exc}") from None
    if not documents:
        raise ClusterError(f"{where}: no documents; it needs a NodePool and its KWOKNodeClass")
    for i, doc in enumerate(documents):
        api = doc.get("apiVersion", "") if isinstance(doc, dict) else ""
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc, dict) else None
        if not str(api).startswith(GROUPS) or not doc.get("kind") or not name:
            raise ClusterError(
                f"{where}: document {i + 1} is not a named Karpenter object (apiVersion karpenter.sh/v1 or "
                f"karpenter.kwok.sh/v1alpha1, kind, metadata.name); got apiVersion {api!r}"
            )
    return documents


def crds(directory: Path) -> list[dict[str, Any]]:
    """The kwok provider's CRDs, as its module ships them."""
    return [yaml.safe_load(f.read_text()) for f in sorted(directory.glob("*.yaml"))]


def environment(kubeconfig: Path, instance_types: Path, metrics: int, health: int) -> dict[str, str]:
    """What its Deployment sets, for a process outside the cluster (docs/karpenter.md has each)."""
    return {
        "KUBECONFIG": str(kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "METRICS_PORT": str(metrics),
        "HEALTH_PROBE_PORT": str(health),
        # Simulate the pods' DRA claims against the instance types' templates (default true: skip them).
        "IGNORE_DRA_REQUESTS": "false",
        "INSTANCE_TYPES_FILE_PATH": str(instance_types),
        "LOG_LEVEL": os.environ.get("FAKEPLUGIN_KARPENTER_LOG_LEVEL", "info"),
    }


def render_instance_types(inventory: Path, plugin_args: list[str], kubernetes_version: str) -> str:
    """`fakeplugin render --karpenter-instance-types` of the inventory with the fleet's flags (JSON)."""
    argv = [
        sys.executable,
        "-m",
        "fakeplugin",
        "render",
        f"--inventory={inventory}",
        "--karpenter-instance-types",
        f"--kubernetes-version={kubernetes_version}",
        *fleet_flags(plugin_args),
    ]
    argv = [a for a in argv if not a.startswith(PREPARE_ONLY_FLAGS)]  # not render flags
    source = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        argv, capture_output=True, text=True, env=python_env(os.environ, source), check=False
    )
    if out.returncode != 0:
        raise ClusterError(f"--with karpenter: {out.stderr.strip()}")
    return out.stdout


class Karpenter:
    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store, self._processes, self._kubectl = store, processes, kubectl

    def start(self, req: KarpenterRequest) -> None:
        """Instance types, CRDs, Karpenter, its NodePools; returns once it answers its health probe."""
        state = self._store.require()
        home = self._store.layout.karpenter
        home.mkdir(parents=True, exist_ok=True)
        types = home / "instance-types.json"
        text = render_instance_types(Path(state.inventory), state.plugin_args, state.kubernetes_version)
        write_atomic(types, text.encode(), mode=0o644)
        names = [t["name"] for t in json.loads(text)]
        log.info("Karpenter %s: %d instance types: %s", req.version, len(names), ", ".join(names))
        definitions = crds(req.crds)
        self._kubectl.send("apply", definitions, timeout=120.0, server_side=True)
        for crd in definitions:
            self._kubectl(
                "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
            )
        apiserver = int(state.ports["apiserver"])
        metrics, health = free_ports(2)
        api, metrics_sock, health_sock = (home / n for n in ("api.sock", "metrics.sock", "health.sock"))
        self._processes.launch(
            BRIDGE,
            [
                bridge_argv(
                    f"unix:{api}=tcp:{apiserver}",
                    f"tcp:{metrics}=unix:{metrics_sock}",
                    f"tcp:{health}=unix:{health_sock}",
                )
            ],
        )
        argvs = isolated_argvs(
            "karpenter-netns",
            [
                f"tcp:{apiserver}=unix:{api}",
                f"unix:{metrics_sock}=tcp:{metrics}",
                f"unix:{health_sock}=tcp:{health}",
            ],
            [str(req.binary)],
        )
        env = {**os.environ, **environment(self._store.layout.kubeconfig, types, metrics, health)}
        self._processes.launch(NAME, argvs, env=env)
        self._processes.wait_http(NAME, f"http://{LOOPBACK}:{health}/readyz")
        self._kubectl.send("apply", list(req.nodepools))
        log.info("Karpenter %s: metrics on http://%s:%d/metrics", req.version, LOOPBACK, metrics)
