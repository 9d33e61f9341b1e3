"""The chart's GPU Operator surface (gpuOperator.mode; docs/prometheus.md, *The GPU Operator's exporter*): per
mode, the node labels' flag and grant, the inventory's default mode, and with telemetry the operator's DCGM
exporter Service and pod labels, checked against what a monitoring config written for the operator selects.
Rendered with the helm of hack/build-k8s.sh, as tests/test_chart.py does.

The operator's objects, as NVIDIA/gpu-operator writes them (the expected values below come from there, not
from the chart):
- ClusterPolicy, v26.3.1 (commit 5a25fef4572b2b36e32ebcacd482b586e467dc2d): assets/state-dcgm-exporter/
  0400_service.yaml (Service nvidia-dcgm-exporter, label and selector app=nvidia-dcgm-exporter, annotation
  prometheus.io/scrape "true", port gpu-metrics 9400), 0500_service_monitor.yaml (ServiceMonitor
  nvidia-dcgm-exporter: selector app=nvidia-dcgm-exporter, endpoint port gpu-metrics path /metrics,
  jobLabel app, namespaceSelector the operator's namespace), 0800_daemonset.yaml (pods labelled
  app=nvidia-dcgm-exporter).
- GPUCluster, v26.7.0 (commit 10ee5b3638b89e11e949412aafa5ba99279c3721): manifests/state-dcgm-exporter/
  0500_service.yaml, 0600_service_monitor.yaml, 0700_daemonset.yaml: the same shape named
  nvidia-dcgm-exporter-dra (its Service, ServiceMonitor, `app` label and pods).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.inventory import parse_inventory
from tests.harness import chart
from tests.harness.chart import (
    NAMESPACE,
    RELEASE,
    SEED_LAB,
    env_of,
    fleet_render,
    granted,
    named,
    objects,
    only,
    parse_with_env,
    plugin_container,
    refusal,
    render,
    template,
)
from tests.harness.paths import REPO
from tests.harness.rbac import KUBELET_PLUGIN_GPU_OPERATOR_LABELS_CALLS

pytestmark = pytest.mark.build  # helm, from hack/build-k8s.sh


helm = chart.helm  # the fixture, module-scoped: one lookup per module

# The operator's exporter per mode: its Service's name and the `app` label of its Service and pods.
OPERATOR_APP = {"clusterPolicy": "nvidia-dcgm-exporter", "gpuCluster": "nvidia-dcgm-exporter-dra"}
OPERATOR_NAMESPACE = "gpu-operator"  # the operator's install guide: helm install ... -n gpu-operator
TELEMETRY = "telemetry.enabled=true"


def operator_service_monitor(app: str, namespace: str) -> dict[str, Any]:
    """The operator's ServiceMonitor spec for its exporter, as its assets write it (module docstring)."""
    return {
        "jobLabel": "app",
        "namespaceSelector": {"matchNames": [namespace]},
        "selector": {"matchLabels": {"app": app}},
        "endpoints": [{"port": "gpu-metrics", "path": "/metrics"}],
    }


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


def scraped_pods(objs: list[dict[str, Any]], monitor: dict[str, Any]) -> list[str]:
    """What Prometheus Operator scrapes for a ServiceMonitor spec: the Services in its namespaces whose labels
    match, with the endpoint's port name; of each, the pod templates its selector matches, as
    `<kind>/<name>:<containerPort>` (the port the Service's named targetPort resolves to there)."""
    port_name = monitor["endpoints"][0]["port"]
    found = []
    for service in objs:
        if (
            service["kind"] != "Service"
            or service["metadata"]["namespace"] not in monitor["namespaceSelector"]["matchNames"]
        ):
            continue
        if not selects(monitor["selector"]["matchLabels"], service["metadata"]["labels"]):
            continue
        ports = [p for p in service["spec"]["ports"] if p["name"] == port_name]
        for port in ports:
            for workload in objs:
                if workload["kind"] not in ("DaemonSet", "Deployment"):
                    continue
                template = workload["spec"]["template"]
                if not selects(service["spec"]["selector"], template["metadata"]["labels"]):
                    continue
                container_ports = {
                    p["name"]: p["containerPort"]
                    for c in template["spec"]["containers"]
                    for p in c.get("ports", [])
                }
                found.append(
                    f"{workload['kind']}/{workload['metadata']['name']}:{container_ports[port['targetPort']]}"
                )
    return sorted(found)


def workloads(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] in ("DaemonSet", "Deployment")}


def pod_labels(objs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {name: w["spec"]["template"]["metadata"]["labels"] for name, w in workloads(objs).items()}


def test_none_is_the_default_and_renders_no_operator_object(helm: Path) -> None:
    """The default and `none`, with telemetry on: no operator Service or label, no node labels' flag or grant;
    the inventory says `gpuOperator: none`, so no node of the chart gets the operator's labels."""
    default = objects(render(helm, "--set", TELEMETRY))
    assert objects(render(helm, "--set", f"{TELEMETRY},gpuOperator.mode=none")) == default
    services = [o["metadata"]["name"] for o in default if o["kind"] == "Service"]
    assert services == [f"{RELEASE}-telemetry"]
    assert not [o for o in default if o["kind"] == "ServiceMonitor"]
    assert "app" not in only(default, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert "GPU_OPERATOR_LABELS" not in env_of(plugin_container(default))
    name = only(default, "ServiceAccount")["metadata"]["name"]
    assert not KUBELET_PLUGIN_GPU_OPERATOR_LABELS_CALLS & granted(default, name)
    inventory = yaml.safe_load(only(default, "ConfigMap")["data"]["inventory.yaml"])
    assert inventory["gpuOperator"] == "none"
    fleet = fleet_render(helm, "--set", f"{TELEMETRY},gpuOperator.serviceMonitor.enabled=true")
    assert not [o for o in fleet if o["kind"] == "ServiceMonitor"]
    assert all("app" not in labels for labels in pod_labels(fleet).values())


@pytest.mark.parametrize("mode", OPERATOR_APP)
def test_the_operators_service_monitor_scrapes_ours_unchanged(helm: Path, mode: str) -> None:
    """Installed into the operator's namespace, the operator's own ServiceMonitor (written from its assets)
    finds our Service by its labels and port name, and through it every pod that serves our metrics: the
    kubelet plugin's and each fleet shard's, at their metrics port; kwok's pods are not among them."""
    app = OPERATOR_APP[mode]
    result = template(
        helm,
        *chart.FLEET_CASES["fleet"],
        "--set",
        f"{TELEMETRY},telemetry.port=9500,gpuOperator.mode={mode}",
        namespace=OPERATOR_NAMESPACE,
    )
    assert result.returncode == 0, result.stderr
    objs = objects(result.stdout)
    monitor = operator_service_monitor(app, OPERATOR_NAMESPACE)
    assert scraped_pods(objs, monitor) == [
        f"DaemonSet/{RELEASE}-kubelet-plugin:9500",
        f"Deployment/{RELEASE}-fleet-0:9500",
        f"Deployment/{RELEASE}-fleet-1:9500",
    ]
    [service] = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == app]
    assert service["metadata"]["namespace"] == OPERATOR_NAMESPACE
    assert service["metadata"]["labels"]["app"] == app
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "gpu-metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    # A kubernetes-pods job keeping app=<the operator's name> (relabelling __meta_kubernetes_pod_label_app).
    labelled = sorted(name for name, labels in pod_labels(objs).items() if labels.get("app") == app)
    assert labelled == [f"{RELEASE}-fleet-0", f"{RELEASE}-fleet-1", f"{RELEASE}-kubelet-plugin"]
    other = next(a for m, a in OPERATOR_APP.items() if m != mode)
    assert scraped_pods(objs, operator_service_monitor(other, OPERATOR_NAMESPACE)) == []


@pytest.mark.parametrize("mode", OPERATOR_APP)
def test_a_mode_keeps_every_selector_and_labels_the_nodes(helm: Path, mode: str, monkeypatch: Any) -> None:
    """Changing the mode changes pod template labels only, never a selector (immutable: `helm upgrade` would
    fail); the plugin keeps its node's labels (GPU_OPERATOR_LABELS reaches `serve`) with exactly the extra
    grant, and the inventory's default mode is the chart's."""
    plain = fleet_render(helm, "--set", TELEMETRY)
    objs = fleet_render(helm, "--set", f"{TELEMETRY},gpuOperator.mode={mode}")
    assert {n: w["spec"]["selector"] for n, w in workloads(objs).items()} == {
        n: w["spec"]["selector"] for n, w in workloads(plain).items()
    }
    for name, labels in pod_labels(objs).items():
        added = {k: v for k, v in labels.items() if pod_labels(plain)[name].get(k) != v}
        assert added == ({} if name.endswith("-kwok") else {"app": OPERATOR_APP[mode]}), name
    account = only(objs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    assert granted(objs, account) == granted(plain, account) | KUBELET_PLUGIN_GPU_OPERATOR_LABELS_CALLS
    args = parse_with_env(monkeypatch, plugin_container(objs), {"spec.nodeName": "n", "metadata.uid": "u"})
    assert args.gpu_operator_labels is True
    inventory = parse_inventory(
        yaml.safe_load(named(objs, "ConfigMap", f"{RELEASE}-inventory")["data"]["inventory.yaml"])
    )
    assert {e.gpu_operator for e in inventory.nodes} == {mode}


def test_a_mode_without_telemetry_labels_nodes_only(helm: Path) -> None:
    """As the operator with its exporter off: node labels, but no exporter Service and no pod label."""
    objs = objects(
        render(helm, "--set", "gpuOperator.mode=gpuCluster,gpuOperator.serviceMonitor.enabled=true")
    )
    assert [o for o in objs if o["kind"] in ("Service", "ServiceMonitor")] == []
    assert "app" not in only(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert env_of(plugin_container(objs))["GPU_OPERATOR_LABELS"] == "true"


@pytest.mark.parametrize("mode", OPERATOR_APP)
def test_the_service_monitor_is_the_operators(helm: Path, mode: str) -> None:
    """gpuOperator.serviceMonitor.enabled: the operator's ServiceMonitor (its name, selector, endpoint,
    jobLabel, namespace), which finds what the operator's own would."""
    app = OPERATOR_APP[mode]
    objs = fleet_render(
        helm, "--set", f"{TELEMETRY},gpuOperator.mode={mode},gpuOperator.serviceMonitor.enabled=true"
    )
    monitor = only(objs, "ServiceMonitor")
    assert monitor["metadata"]["name"] == app
    assert monitor["metadata"]["labels"]["app"] == app
    spec = monitor["spec"]
    expected = operator_service_monitor(app, NAMESPACE)
    assert {k: spec[k] for k in ("jobLabel", "namespaceSelector", "selector")} == {
        k: expected[k] for k in ("jobLabel", "namespaceSelector", "selector")
    }
    # The operator chart's defaults (deployments/gpu-operator/values.yaml dcgmExporter.serviceMonitor).
    assert spec["endpoints"] == [
        {"port": "gpu-metrics", "path": "/metrics", "interval": "15s", "honorLabels": False}
    ]
    assert scraped_pods(objs, spec) == scraped_pods(objs, expected) != []


def test_the_inventorys_own_mode_wins(helm: Path, tmp_path: Path) -> None:
    """An inventory that says `gpuOperator` keeps it, as text (--set-file) or as a map; one that does not gets
    the chart's mode, the text kept as written with the line appended."""
    text = (REPO / "examples" / "seed-lab.yaml").read_text()
    assert "gpuOperator" not in text
    as_text = only(objects(render(helm, *SEED_LAB, "--set", "gpuOperator.mode=gpuCluster")), "ConfigMap")
    written = as_text["data"]["inventory.yaml"]
    assert written.startswith(text.rstrip("\n")) and yaml.safe_load(written)["gpuOperator"] == "gpuCluster"
    own = tmp_path / "inventory.yaml"
    own.write_text(f"gpuOperator: clusterPolicy\n{text}")
    kept = only(
        objects(render(helm, "--set-file", f"inventory={own}", "--set", "gpuOperator.mode=gpuCluster")),
        "ConfigMap",
    )
    assert kept["data"]["inventory.yaml"] == own.read_text()
    as_map = tmp_path / "values.yaml"
    as_map.write_text(yaml.safe_dump({"inventory": yaml.safe_load(own.read_text())}))
    mapped = only(objects(render(helm, "-f", str(as_map), "--set", "gpuOperator.mode=none")), "ConfigMap")
    assert yaml.safe_load(mapped["data"]["inventory.yaml"])["gpuOperator"] == "clusterPolicy"


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("gpuOperator.mode=ClusterPolicy", "/gpuOperator/mode"),
        ("gpuOperator.modes=none", "additional properties 'modes' not allowed"),
        ("gpuOperator.serviceMonitor.enable=true", "additional properties 'enable' not allowed"),
        ("kubeletPlugin.gpuOperatorLabels=true", "additional properties 'gpuOperatorLabels' not allowed"),
    ],
)
def test_schema_refuses_bad_values(helm: Path, setting: str, message: str) -> None:
    assert message in refusal(helm, "--set", setting)
