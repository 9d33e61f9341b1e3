"""GPU-utilisation autoscaling with real KEDA (operator and metrics API server built from its Go module,
hack/build-k8s.sh --only keda) and real Prometheus (Debian's) on a local cluster (docs/hpa.md): the plugin's
dcgm-exporter endpoint (`serve --telemetry-endpoint`) is scraped by Prometheus; KEDA's ScaledObject of
examples/hpa/ makes an HPA that reads `external.metrics.k8s.io` through the API server's aggregation layer
from KEDA's metrics API server; kube-controller-manager's HPA controller scales the Deployment. The load is
the `fakeplugin.dev/gpu-load` annotation on the running pod.

Checked: the external metric the HPA reads is the PromQL sum of DCGM_FI_DEV_GPU_UTIL of the Deployment's
pods; a load of 90 % scales the Deployment from 1 to 2 replicas, each with a GPU of its own; back to 0 %,
it scales to 1 again.

Long tier only (hack/test.sh --long): the KEDA build takes about 6 minutes on 2 cores.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import Cluster, prometheus
from fakeplugin.telemetry.load import ANNOTATION
from tests.harness.host import own_cluster, require_keda, require_prometheus
from tests.harness.kube import apply, apply_file, get, items, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "hpa"
NAMESPACE = "hpa"
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [{"name": "gpu-0", "kubelet": True, "gpus": [{"profile": "t10", "count": 4}]}],
}
QUERY = 'sum(DCGM_FI_DEV_GPU_UTIL{namespace="hpa", pod=~"inference-.*"})'
TIMEOUT = 120.0


def prometheus_query(url: str, query: str) -> list[dict[str, Any]]:
    return prometheus.api(url, "query", query=query)["result"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(
        tmp_path_factory,
        "hpa",
        INVENTORY,
        NAMESPACE,
        prometheus=require_prometheus(),
        keda=require_keda(),
    ) as c:
        yield c


@pytest.fixture(scope="module")
def prometheus_url(cluster: Cluster) -> str:
    """The cluster's Prometheus (`--with prometheus`), scraping the node's telemetry every 2 s."""
    url = cluster.prometheus_url
    assert url is not None
    return url


@pytest.fixture(scope="module")
def scaled(cluster: Cluster, prometheus_url: str) -> Cluster:
    """examples/hpa/ applied, its ScaledObject pointed at our Prometheus; returns once its one pod runs."""
    apply_file(cluster, NAMESPACE, EXAMPLES / "inference.yaml")
    (scaled_object,) = [d for d in yaml.safe_load_all((EXAMPLES / "scaledobject.yaml").read_text()) if d]
    (trigger,) = scaled_object["spec"]["triggers"]
    assert trigger["metadata"]["query"] == QUERY  # what the docs show
    trigger["metadata"]["serverAddress"] = prometheus_url.rstrip("/")
    apply(cluster, NAMESPACE, scaled_object)
    wait_for(lambda: running_pods(cluster, 1), what="the inference Deployment's pod to run", timeout=TIMEOUT)
    return cluster


def running_pods(cluster: Cluster, count: int) -> list[dict[str, Any]] | None:
    pods = [
        p
        for p in items(cluster, "pods", "-n", NAMESPACE, "-l", "app=inference")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return pods if len(pods) == count else None


def replicas(cluster: Cluster) -> int:
    return int(get(cluster, "deployment", "inference", "-n", NAMESPACE)["spec"]["replicas"])


def set_load(cluster: Cluster, utilization: int) -> None:
    """The command of docs/hpa.md: every running inference pod gets the load."""
    cluster.kubectl(*f"annotate pod -n hpa -l app=inference {ANNOTATION}={utilization} --overwrite".split())


def external_metric(cluster: Cluster) -> list[dict[str, Any]]:
    """What the HPA controller reads: external.metrics.k8s.io, from KEDA through the aggregation layer."""
    hpa = get(cluster, "hpa", "keda-hpa-inference", "-n", NAMESPACE)
    (metric,) = hpa["spec"]["metrics"]
    name = metric["external"]["metric"]["name"]
    selector = ",".join(
        f"{k}={v}" for k, v in metric["external"]["metric"]["selector"]["matchLabels"].items()
    )
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/{name}?labelSelector={selector}"
    return json.loads(cluster.kubectl("get", "--raw", path).stdout)["items"]


def summed(prometheus_url: str) -> float | None:
    result = prometheus_query(prometheus_url, QUERY)
    return float(result[0]["value"][1]) if result else None


def test_the_hpa_reads_the_summed_gpu_utilisation_through_keda(scaled: Cluster, prometheus_url: str) -> None:
    (pod,) = running_pods(scaled, 1) or []
    name = pod["metadata"]["name"]
    # The pod's GPU series as Prometheus scraped it from the plugin: attributed to the pod, idle.
    series = wait_for(
        lambda: prometheus_query(prometheus_url, f'DCGM_FI_DEV_GPU_UTIL{{namespace="hpa", pod="{name}"}}'),
        what=f"{name}'s DCGM_FI_DEV_GPU_UTIL in Prometheus",
        timeout=TIMEOUT,
    )
    assert [(s["metric"]["container"], s["value"][1]) for s in series] == [("server", "0")]
    # The HPA KEDA made reads the same value through external.metrics.k8s.io.
    hpa = wait_for(
        lambda: _condition(get(scaled, "hpa", "keda-hpa-inference", "-n", NAMESPACE), "ScalingActive"),
        what="the HPA to find its external metric",
        timeout=TIMEOUT,
    )
    assert hpa["reason"] == "ValidMetricFound", hpa
    (value,) = external_metric(scaled)
    assert value["value"] == "0" and value["metricName"] == "s0-prometheus"
    assert replicas(scaled) == 1


def test_a_load_of_90_percent_scales_up_and_back_when_it_drops(scaled: Cluster, prometheus_url: str) -> None:
    (pod,) = running_pods(scaled, 1) or []
    set_load(scaled, 90)
    started = time.monotonic()
    wait_for(
        lambda: summed(prometheus_url) == 90.0,
        what="the summed utilisation at 90 in Prometheus",
        timeout=TIMEOUT,
    )
    pods = wait_for(lambda: running_pods(scaled, 2), what="a second inference pod", timeout=TIMEOUT)
    scaled_up = time.monotonic() - started
    assert replicas(scaled) == 2  # ceil(90 / 50): no more
    # Each replica has a GPU of its own: two claims, two devices.
    claims = items(scaled, "resourceclaims", "-n", NAMESPACE)
    devices = {r["device"] for c in claims for r in c["status"]["allocation"]["devices"]["results"]}
    assert len(claims) == 2 and len(devices) == 2, claims
    (value,) = external_metric(scaled)
    assert value["value"] == "90"
    loaded = [p["metadata"]["name"] for p in pods if ANNOTATION in p["metadata"].get("annotations", {})]
    assert loaded == [pod["metadata"]["name"]]

    set_load(scaled, 0)
    started = time.monotonic()
    wait_for(lambda: replicas(scaled) == 1, what="the Deployment back at 1 replica", timeout=TIMEOUT)
    wait_for(lambda: running_pods(scaled, 1), what="one inference pod", timeout=TIMEOUT)
    print(f"scaled up in {scaled_up:.0f} s, down in {time.monotonic() - started:.0f} s")


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    found = [
        c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind and c["status"] == "True"
    ]
    return found[0] if found else None
