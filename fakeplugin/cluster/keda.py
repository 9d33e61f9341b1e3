"""KEDA on a local cluster: its operator and its metrics API server (`external.metrics.k8s.io` through the
API server's aggregation layer), built from its Go module (hack/build-k8s.sh --only keda), run on
loopback against the cluster as its Deployments would run in one (docs/hpa.md).

What `start` does, in order: namespace keda; KEDA's CRDs (config/crd/bases of its module); one CA and a
certificate for 127.0.0.1 and the Services' names, for serving and as a client (the operator's gRPC
metrics service and the adapter authenticate each other with it, as with the certificates KEDA's cert
rotation makes); the operator (process `keda`); the metrics API server (process `keda-adapter`) in a
network namespace of its own, joined to the cluster's loopback by byte relays (fakeplugin.cluster.bridge;
process `keda-bridge` on the host side); its Service and APIService; then it waits until the API server
serves `external.metrics.k8s.io/v1beta1`.

Two things differ from a cluster, both because everything here is a host process on 127.0.0.1:
- The Service `keda-metrics-apiserver` is of type ExternalName, `127.0.0.1`: the aggregation layer
  resolves an ExternalName Service to that host and the APIService's port (k8s.io/apiserver
  pkg/util/proxy ResolveCluster), where the bridge listens. A ClusterIP Service would need a kube-proxy,
  and EndpointSlices refuse loopback addresses.
- The metrics API server's own /metrics listener binds every interface (cmd/adapter/main.go
  RunMetricsServer: `fmt.Sprintf(":%v", port)`, no flag for the host). In its network namespace that is
  its loopback alone.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.cluster import binaries, versions
from fakeplugin.cluster.bridge import bridge_argv, isolated_argvs
from fakeplugin.cluster.components import LOOPBACK
from fakeplugin.cluster.credentials import serving_certificate
from fakeplugin.cluster.kubectl import Kubectl
from fakeplugin.cluster.machine import found_or_built, free_ports
from fakeplugin.cluster.state import StateStore
from fakeplugin.cluster.supervisor import Supervisor

log = logging.getLogger("fakeplugin.cluster")

NAME = "keda"  # the operator's process; the others are keda-adapter and keda-bridge
NAMESPACE = "keda"
# Names as KEDA's manifests give them (config/metrics-server/service.yaml, api_service.yaml).
SERVICE = "keda-metrics-apiserver"
OPERATOR_SERVICE = "keda-operator"
GROUP = "external.metrics.k8s.io"
API_VERSION = "v1beta1"
API_SERVICE = f"{API_VERSION}.{GROUP}"


@dataclass(frozen=True)
class KedaRequest:
    """KEDA as asked for, checked: its version, binaries and module files."""

    version: str
    operator: Path
    adapter: Path
    module: Path


def request(version: str | None = None, *, build: bool = False) -> KedaRequest:
    """KEDA's binaries for `version` (default: the table's), built first with `build`."""
    chosen = version or versions.KEDA_VERSION
    operator, adapter, module = found_or_built(
        f"KEDA {chosen}", lambda: binaries.find_keda(chosen), build, lambda: binaries.build(["keda"])
    )
    log.info("using KEDA %s: %s, %s", chosen, operator, adapter)
    return KedaRequest(chosen, operator, adapter, module)


def crds(module: Path) -> list[dict[str, Any]]:
    """KEDA's CRDs, as its module ships them (config/crd/bases)."""
    return [
        yaml.safe_load(f.read_text()) for f in sorted((module / "config" / "crd" / "bases").glob("*.yaml"))
    ]


def service(port: int) -> dict[str, Any]:
    """`keda-metrics-apiserver` as an ExternalName Service for 127.0.0.1 (see the module docstring)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NAMESPACE},
        "spec": {
            "type": "ExternalName",
            "externalName": LOOPBACK,
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    }


def api_service(module: Path, port: int, ca: bytes) -> dict[str, Any]:
    """KEDA's APIService (config/metrics-server/api_service.yaml) with its port and our CA."""
    manifest = yaml.safe_load((module / "config" / "metrics-server" / "api_service.yaml").read_text())
    manifest["spec"]["service"]["port"] = port
    manifest["spec"]["caBundle"] = base64.b64encode(ca).decode()
    return manifest


def env(kubeconfig: Path) -> dict[str, str]:
    """What KEDA's Deployments set (WATCH_NAMESPACE empty: every namespace), and the kubeconfig."""
    return {
        "WATCH_NAMESPACE": "",
        "POD_NAMESPACE": NAMESPACE,
        "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(kubeconfig),
    }


def operator_argv(binary: Path, certs: Path, probe: int, metrics: int, grpc: int) -> list[str]:
    """The operator (config/manager/manager.yaml's args) with every listener on loopback, our
    certificates in place of its cert rotation, and nothing of the cluster patched by it."""
    return [
        str(binary),
        "--leader-elect=false",
        "--zap-log-level=info",
        "--zap-encoder=console",
        f"--health-probe-bind-address={LOOPBACK}:{probe}",
        f"--metrics-bind-address={LOOPBACK}:{metrics}",
        f"--metrics-service-bind-address={LOOPBACK}:{grpc}",
        f"--cert-dir={certs}",
        "--enable-cert-rotation=false",
        "--enable-webhook-patching=false",
        "--enable-apiservice-patching=false",
    ]


def adapter_argv(
    binary: Path, certs: Path, kubeconfig: Path, secure: int, grpc: int, metrics: int
) -> list[str]:
    """The metrics API server (config/metrics-server/deployment.yaml's args) on loopback, reaching the
    operator's gRPC metrics service at 127.0.0.1."""
    return [
        str(binary),
        f"--secure-port={secure}",
        f"--bind-address={LOOPBACK}",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--cert-dir={certs}",
        f"--metrics-service-address={LOOPBACK}:{grpc}",
        f"--port={metrics}",
        f"--kubeconfig={kubeconfig}",
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--zap-log-level=info",
        "--zap-encoder=console",
    ]


class Keda:
    def __init__(self, store: StateStore, processes: Supervisor, kubectl: Kubectl) -> None:
        self._store, self._processes, self._kubectl = store, processes, kubectl

    def start(self, req: KedaRequest) -> None:
        """KEDA's CRDs, operator, metrics API server and APIService; returns once the API server serves
        external.metrics.k8s.io."""
        layout = self._store.layout
        home, kubeconfig = layout.keda, layout.kubeconfig
        certs = home / "certs"
        names = [f"{s}.{NAMESPACE}.svc" for s in (SERVICE, OPERATOR_SERVICE)]
        ca = serving_certificate(certs, LOOPBACK, names, client=True)
        probe, metrics, grpc, secure, adapter_metrics = free_ports(5)
        apiserver = int(self._store.require().ports["apiserver"])
        self._kubectl.send(
            "apply", [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
        )
        definitions = crds(req.module)
        self._kubectl.send("apply", definitions, timeout=120.0, server_side=True)
        for crd in definitions:
            self._kubectl(
                "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
            )
        log.info("KEDA %s: %d CRDs established", req.version, len(definitions))
        environment = {**os.environ, **env(kubeconfig)}
        self._processes.launch(
            NAME, [operator_argv(req.operator, certs, probe, metrics, grpc)], env=environment
        )
        self._processes.wait_http(NAME, f"http://{LOOPBACK}:{probe}/readyz")
        # The unix sockets the two sides meet at: the host side listens for the API server and the
        # operator's gRPC service, the adapter's side for the aggregation layer.
        api, grpc_sock, adapter_sock = (home / n for n in ("api.sock", "grpc.sock", "adapter.sock"))
        self._processes.launch(
            "keda-bridge",
            [
                bridge_argv(
                    f"unix:{api}=tcp:{apiserver}",
                    f"unix:{grpc_sock}=tcp:{grpc}",
                    f"tcp:{secure}=unix:{adapter_sock}",
                )
            ],
        )
        argvs = isolated_argvs(
            "keda-netns",
            [
                f"tcp:{apiserver}=unix:{api}",
                f"tcp:{grpc}=unix:{grpc_sock}",
                f"unix:{adapter_sock}=tcp:{secure}",
            ],
            adapter_argv(req.adapter, certs, kubeconfig, secure, grpc, adapter_metrics),
        )
        self._processes.launch("keda-adapter", argvs, env=environment)
        self._kubectl.send("apply", [service(secure), api_service(req.module, secure, ca)])
        self._processes.wait(
            f"the API server to serve {GROUP}/{API_VERSION} (KEDA's metrics API server)",
            lambda: self._serves_external_metrics(),
            [self._processes.record(n) for n in (NAME, "keda-bridge", "keda-adapter")],
        )

    def _serves_external_metrics(self) -> bool:
        out = self._kubectl("get", "--raw", f"/apis/{GROUP}/{API_VERSION}", check=False)
        return out.returncode == 0 and json.loads(out.stdout).get("groupVersion") == f"{GROUP}/{API_VERSION}"
