"""The scrape job prometheus-operator generates for the GPU Operator's ServiceMonitor of its DCGM
exporter: NVIDIA/gpu-operator v26.3.1 assets/state-dcgm-exporter/0500_service_monitor.yaml (selector
`app`, endpoint port `gpu-metrics`, path `/metrics`, `jobLabel: app`, namespaceSelector the operator's
namespace) with the operator chart's defaults (deployments/gpu-operator/values.yaml
dcgmExporter.serviceMonitor: interval 15s, honorLabels false); v26.7.0's GPUCluster one
(manifests/state-dcgm-exporter/0600_service_monitor.yaml) differs in its name `nvidia-dcgm-exporter-dra`.
Run by tests/kind/test_operator_prometheus.py, shown in docs/prometheus.md (tests/test_docs.py)."""

from __future__ import annotations

from typing import Any

OPERATOR_NAMESPACE = "gpu-operator"  # the operator's install guide's; its ServiceMonitor's namespaceSelector
PORT = "gpu-metrics"


def service_monitor_job(app: str) -> dict[str, Any]:
    """The scrape job prometheus-operator generates for the operator's ServiceMonitor `app` (endpoint 0):
    endpoints discovery in the monitor's namespace, the Service's `app` label and port name kept, the target
    labelled with namespace, service, pod, container and endpoint, `job` from the Service's `app` label
    (jobLabel)."""
    return {
        "job_name": f"serviceMonitor/{OPERATOR_NAMESPACE}/{app}/0",
        "honor_labels": False,
        "scrape_interval": "15s",
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [{"role": "endpoints", "namespaces": {"names": [OPERATOR_NAMESPACE]}}],
        "relabel_configs": [
            {
                "action": "keep",
                "source_labels": [
                    "__meta_kubernetes_service_label_app",
                    "__meta_kubernetes_service_labelpresent_app",
                ],
                "regex": f"({app});true",
            },
            {"action": "keep", "source_labels": ["__meta_kubernetes_endpoint_port_name"], "regex": PORT},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
            {
                "source_labels": ["__meta_kubernetes_service_label_app"],
                "target_label": "job",
                "regex": "(.+)",
            },
            {"target_label": "endpoint", "replacement": PORT},
        ],
    }
