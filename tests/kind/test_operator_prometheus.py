"""A real Prometheus scraping our metrics through the GPU Operator's exporter Service in kind
(docs/prometheus.md, *The GPU Operator's exporter*), with a scrape config written for the operator's exporter,
unchanged.

Prometheus is built here from its Go module with Kubernetes service discovery (Debian's package, which the
local cluster runs, has none) into an image on the local Debian base (hack/kind/tool-image.sh prometheus),
with a ServiceAccount and a ClusterRole to list and watch what Kubernetes service discovery reads. Its jobs
are what prometheus-operator compiles the operator's ServiceMonitor to, one per mode
(tests/harness/servicemonitor.py, with the upstream files).

The chart goes into the namespace `gpu-operator` (a Service selects pods of its own namespace) with
`telemetry.enabled` and each `gpuOperator.mode`: Prometheus's API then has `up == 1` for each plugin pod under
the mode's job, and a `DCGM_FI_DEV_GPU_TEMP` series for each GPU the kind nodes publish, with the exporter's
`hostname` and `UUID` and the job, namespace, service and pod the ServiceMonitor's relabelling gives.

This module runs after test_kind.py uninstalled the session's release (tests/kind/conftest.py); run alone, it
moves that release out of the way and installs it again after, with the values it had.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness.kind import CLUSTER as CLUSTER_NAME
from tests.harness.kind import KIND as KIND_BIN
from tests.harness.kind import NAMESPACE, KindCluster
from tests.harness.kube import apply, wait_for
from tests.harness.paths import REPO
from tests.harness.servicemonitor import OPERATOR_NAMESPACE, PORT, service_monitor_job

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

RELEASE = "fakeplugin"
MONITORING = "monitoring"
PROMETHEUS = "prometheus"
# gpuOperator.mode -> the exporter's Service name and `app` label (charts/fakeplugin/templates/_helpers.tpl).
EXPORTERS = {"clusterPolicy": "nvidia-dcgm-exporter", "gpuCluster": "nvidia-dcgm-exporter-dra"}


def prometheus_objects(image: str) -> list[dict[str, Any]]:
    """Prometheus in its namespace MONITORING: its config (one job per operator mode), RBAC for service
    discovery, a Deployment running IMAGE and a Service in front of its API."""
    config = {
        "global": {"scrape_interval": "15s"},
        "scrape_configs": [service_monitor_job(a) for a in EXPORTERS.values()],
    }
    labels = {"app": PROMETHEUS}
    meta = {"name": PROMETHEUS, "namespace": MONITORING}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{MONITORING}-{PROMETHEUS}"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{MONITORING}-{PROMETHEUS}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{MONITORING}-{PROMETHEUS}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": PROMETHEUS, "namespace": MONITORING}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {"prometheus.yml": yaml.safe_dump(config)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": PROMETHEUS,
                        "containers": [
                            {
                                "name": PROMETHEUS,
                                "image": image,
                                "imagePullPolicy": "IfNotPresent",
                                "args": [
                                    "--config.file=/etc/prometheus/prometheus.yml",
                                    "--storage.tsdb.path=/prometheus",
                                    "--web.listen-address=:9090",
                                ],
                                "ports": [{"name": "web", "containerPort": 9090}],
                                "readinessProbe": {"httpGet": {"path": "/-/ready", "port": "web"}},
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/prometheus"},
                                    {"name": "data", "mountPath": "/prometheus"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "config", "configMap": {"name": PROMETHEUS}},
                            {"name": "data", "emptyDir": {}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {"selector": labels, "ports": [{"name": "web", "port": 9090, "targetPort": "web"}]},
        },
    ]


def query(kind: KindCluster, promql: str) -> list[dict[str, Any]]:
    """An instant query through the API server's service proxy; the result vector."""
    path = f"/api/v1/namespaces/{MONITORING}/services/{PROMETHEUS}:9090/proxy/api/v1/query"
    answer = json.loads(
        kind.kubectl("get", "--raw", f"{path}?{urllib.parse.urlencode({'query': promql})}").stdout
    )
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def install(kind: KindCluster, namespace: str, *values: str) -> None:
    kind.helm(
        "upgrade",
        "--install",
        RELEASE,
        str(kind.chart),
        "-n",
        namespace,
        "--create-namespace",
        *values,
        "--wait",
        "--timeout=5m",
    )


@pytest.fixture(scope="module")
def prometheus(kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    """The session's release moved aside (when installed), Prometheus running; after: Prometheus and the
    chart in OPERATOR_NAMESPACE gone, the session's release back with its values."""
    kind = kind_cluster
    out = kind.run(str(REPO / "hack/kind/tool-image.sh"), "prometheus", timeout=1800)
    image = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["PROMETHEUS_IMAGE"]
    kind.run(str(KIND_BIN), "load", "docker-image", "--name", CLUSTER_NAME, image, timeout=600)
    session_values: Path | None = None
    if RELEASE in kind.helm("list", "-n", NAMESPACE, "-q").split():
        session_values = tmp_path_factory.mktemp("operator-prometheus") / "values.yaml"
        session_values.write_text(kind.helm("get", "values", RELEASE, "-n", NAMESPACE, "-o", "yaml"))
        kind.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")
    try:
        apply(kind, None, *prometheus_objects(image))
        kind.kubectl(
            "rollout", "status", "-n", MONITORING, f"deploy/{PROMETHEUS}", "--timeout=180s", timeout=200
        )
        yield kind
    finally:
        kind.kubectl("delete", "namespace", MONITORING, "--wait", "--timeout=180s", timeout=200)
        kind.kubectl(
            "delete", "clusterrolebinding,clusterrole", f"{MONITORING}-{PROMETHEUS}", "--ignore-not-found"
        )
        kind.helm(
            "uninstall", RELEASE, "-n", OPERATOR_NAMESPACE, "--ignore-not-found", "--wait", "--timeout=5m"
        )
        kind.kubectl(
            "delete",
            "namespace",
            OPERATOR_NAMESPACE,
            "--ignore-not-found",
            "--wait",
            "--timeout=180s",
            timeout=200,
        )
        if session_values is not None:
            install(kind, NAMESPACE, "-f", str(session_values))


@pytest.mark.parametrize("mode", list(EXPORTERS))
def test_prometheus_scrapes_through_the_operator_exporter_service(prometheus: KindCluster, mode: str) -> None:
    kind = prometheus
    app = EXPORTERS[mode]
    install(
        kind,
        OPERATOR_NAMESPACE,
        "-f",
        "examples/seed-lab-values.yaml",
        "--set-file",
        "inventory=demo/kind/inventory.yaml",
        "--set",
        f"telemetry.enabled=true,gpuOperator.mode={mode}",
    )
    kind.kubectl(
        "rollout",
        "status",
        "-n",
        OPERATOR_NAMESPACE,
        "daemonset/fakeplugin-kubelet-plugin",
        "--timeout=300s",
        timeout=320,
    )
    nodes = kind.gpu_nodes()
    plugins = {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in kind.get(
            "pods", "-n", OPERATOR_NAMESPACE, "-l", f"app.kubernetes.io/component=kubelet-plugin,app={app}"
        )["items"]
        if "deletionTimestamp" not in p["metadata"]
    }
    assert sorted(plugins.values()) == nodes, plugins
    target = f'job="{app}",namespace="{OPERATOR_NAMESPACE}",service="{app}",endpoint="{PORT}"'

    def all_up() -> dict[str, float] | None:
        up = {r["metric"]["pod"]: float(r["value"][1]) for r in query(kind, f"up{{{target}}}")}
        return up if up == dict.fromkeys(plugins, 1.0) else None

    wait_for(all_up, what=f"up == 1 for each plugin pod under job {app}", timeout=180, interval=3)

    def temperatures() -> list[dict[str, Any]] | None:
        """The series, once they are one per (node, UUID) the nodes' slices publish, every node's there."""
        published = {
            (s["spec"]["nodeName"], d["attributes"]["uuid"]["string"])
            for s in kind.get("resourceslices")["items"]
            if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"].get("nodeName") in nodes
            for d in s["spec"].get("devices", [])
        }
        series = query(kind, f"DCGM_FI_DEV_GPU_TEMP{{{target}}}")
        seen = {(s["metric"].get("hostname"), s["metric"].get("UUID")) for s in series}
        return series if seen == published and {n for n, _ in seen} == set(nodes) else None

    series = wait_for(
        temperatures, what=f"a DCGM_FI_DEV_GPU_TEMP series per GPU under job {app}", timeout=120, interval=3
    )
    for s in series:
        labels = s["metric"]
        assert plugins[labels["pod"]] == labels["hostname"], labels  # each GPU from its own node's pod
