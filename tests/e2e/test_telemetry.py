"""End-to-end telemetry: `serve --telemetry-endpoint` on a real kubelet node, attributed by the real
kubelet's PodResources List.

One small cluster for the module: one kubelet node with an H200 (a full GPU) and an A100-40GB split into
seven static 1g.5gb MIG devices, and one kwok-simulated node with two H200. Proven against it: a claim
pod's series carry pod, namespace, container and dra_* labels and lose them when the pod is deleted; each
MIG device has its own series; the load annotation moves DCGM_FI_DEV_GPU_UTIL; an injected XID shows in
DCGM_FI_DEV_XID_ERRORS and in the slice's taints; the fleet's one endpoint attributes its simulated
node's GPUs from the pod and its claim (`Cluster.up(telemetry=True)`: every plugin's and fleet's endpoint).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fakeplugin.cluster import Cluster
from fakeplugin.testing import claim_pod, device_request, resource_claim
from fakeplugin.testing.faults import Faults
from tests.harness.host import require_cluster_host
from tests.harness.kube import apply, get, items, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NODE = "telemetry-node"
SIMULATED = "telemetry-sim"
NAMESPACE = "telemetry"
INVENTORY = {
    "driverVersion": "580.159.04",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "name": NODE,
            "gpus": [
                {"profile": "h200"},
                {"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]},
            ],
        },
        {"name": SIMULATED, "kubelet": False, "gpus": [{"profile": "h200", "count": 2}]},
    ],
}
H200 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"


@pytest.fixture(scope="module")
def telemetry_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, int]]:
    require_cluster_host()
    root = tmp_path_factory.mktemp("telemetry")
    inventory = root / "telemetry.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY, sort_keys=False))
    cluster = Cluster.up(inventory, root / "state", telemetry=True, watchdog=True)
    try:
        cluster.kubectl("create", "namespace", NAMESPACE)
        yield cluster, port_of(cluster, f"plugin/{NODE}")
    finally:
        cluster.down()


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) of every sample of the node's /metrics, through the Prometheus parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return [
        (s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples
    ]


def series(port: int, metric: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [
        (lb, v)
        for name, lb, v in scrape(port)
        if name == metric and all(lb.get(k) == want for k, want in labels.items())
    ]


def on(node: str, pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` scheduled onto `node` only (both nodes have H200s)."""
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return pod


def answering(port: int) -> bool:
    """The endpoint accepts connections (a process just started may not yet)."""
    try:
        scrape(port)
    except OSError:
        return False
    return True


def device_taints(cluster: Cluster, device: str) -> list[dict[str, str]]:
    slices = items(cluster, "resourceslices", "--field-selector", f"spec.nodeName={NODE}")
    found = [d for s in slices for d in s["spec"].get("devices") or [] if d["name"] == device]
    return [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in found[0].get("taints") or []]


def test_mig_devices_have_their_own_series(telemetry_cluster: tuple[Cluster, int]) -> None:
    _, port = telemetry_cluster
    temps = wait_for(lambda: series(port, "DCGM_FI_DEV_GPU_TEMP"), what="the endpoint's series")
    instances = sorted(int(lb["GPU_I_ID"]) for lb, _ in temps if lb.get("GPU_I_PROFILE") == "1g.5gb")
    assert instances == [7, 8, 9, 10, 11, 12, 13]
    full = [lb for lb, _ in temps if "GPU_I_PROFILE" not in lb]
    assert [(lb["modelName"], lb["hostname"], lb["DCGM_FI_DRIVER_VERSION"]) for lb in full] == [
        ("NVIDIA H200", NODE, "580.159.04")
    ]
    assert {lb["modelName"] for lb, _ in temps if "GPU_I_PROFILE" in lb} == {"NVIDIA A100-SXM4-40GB"}


def test_claim_pod_attribution_load_xid_and_deletion(telemetry_cluster: tuple[Cluster, int]) -> None:
    cluster, port = telemetry_cluster
    faults = Faults(cluster.kubectl)
    apply(
        cluster,
        NAMESPACE,
        resource_claim("big-gpu", device_request(selector=H200)),
        on(NODE, claim_pod("trainer", {"resourceClaimName": "big-gpu"})),
    )
    wait_for(lambda: pod_phase(cluster, NAMESPACE, "trainer") == "Running", what="the claim pod Running")
    [result] = get(cluster, "resourceclaim", "big-gpu", "-n", NAMESPACE)["status"]["allocation"]["devices"][
        "results"
    ]

    # The real kubelet's PodResources List names the container and its claim's device.
    attributed = wait_for(
        lambda: series(port, "DCGM_FI_DEV_GPU_UTIL", pod="trainer"), what="the pod's labels on its GPU"
    )
    [(labels, value)] = attributed
    assert value == 0  # allocated, idle
    assert {k: v for k, v in labels.items() if k in ATTRIBUTION} == {
        "pod": "trainer",
        "namespace": NAMESPACE,
        "container": "ctr",
        "dra_claim_name": "big-gpu",
        "dra_claim_namespace": NAMESPACE,
        "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": result["pool"],
        "dra_device_name": result["device"],
    }
    assert labels["modelName"] == "NVIDIA H200"

    # The load annotation on the claim moves utilization (and power).
    faults.set_gpu_load("claim", NAMESPACE, "big-gpu", 90)
    wait_for(
        lambda: [v for _, v in series(port, "DCGM_FI_DEV_GPU_UTIL", pod="trainer")] == [90],
        what="DCGM_FI_DEV_GPU_UTIL 90",
        timeout=30,
    )
    [(_, watts)] = series(port, "DCGM_FI_DEV_POWER_USAGE", pod="trainer")
    assert 84 < watts <= 700

    # An XID on the GPU: in DCGM_FI_DEV_XID_ERRORS (with the exporter's message) and in the slice's taints.
    faults.set_device_faults(NODE, f"{result['device']}=xid:79")
    [(xid, _)] = wait_for(
        lambda: series(port, "DCGM_FI_DEV_XID_ERRORS", pod="trainer", err_code="79"),
        what="XID 79",
        timeout=30,
    )
    assert xid["err_msg"] == "GPU has fallen off the bus"
    xid79 = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    wait_for(lambda: device_taints(cluster, result["device"]) == xid79, what="the xid taint", timeout=30)
    faults.clear_node(NODE)
    wait_for(
        lambda: [v for _, v in series(port, "DCGM_FI_DEV_XID_ERRORS", modelName="NVIDIA H200")] == [0],
        what="XID cleared",
        timeout=30,
    )

    # Deleted: its GPU's series lose the pod's labels (and its load: idle again).
    cluster.kubectl("delete", "pod", "trainer", "-n", NAMESPACE, "--wait=true")
    wait_for(
        lambda: not series(port, "DCGM_FI_DEV_GPU_UTIL", pod="trainer"), what="the labels gone", timeout=60
    )
    [(labels, value)] = series(port, "DCGM_FI_DEV_GPU_UTIL", modelName="NVIDIA H200")
    assert not ATTRIBUTION & set(labels)
    assert value == 0  # the claim's load no longer reaches a device no pod uses


ATTRIBUTION: set[str] = {
    "pod",
    "namespace",
    "container",
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_driver_name",
    "dra_pool_name",
    "dra_device_name",
}


def port_of(cluster: Cluster, process: str) -> int:
    """The loopback port of `process`'s telemetry endpoint."""
    port = urlsplit(cluster.telemetry_urls[process]).port
    assert port is not None
    return port


@pytest.fixture(scope="module")
def fleet_port(telemetry_cluster: tuple[Cluster, int]) -> int:
    """The fleet's endpoint: one for every simulated node."""
    return port_of(telemetry_cluster[0], "fleet")


def test_the_fleet_endpoint_attributes_simulated_nodes(
    telemetry_cluster: tuple[Cluster, int], fleet_port: int
) -> None:
    cluster, _ = telemetry_cluster
    wait_for(lambda: answering(fleet_port), what="the fleet's endpoint", timeout=60)
    temps = wait_for(lambda: series(fleet_port, "DCGM_FI_DEV_GPU_TEMP"), what="the fleet's series")
    assert sorted((lb["hostname"], lb["gpu"]) for lb, _ in temps) == [(SIMULATED, "0"), (SIMULATED, "1")]
    apply(
        cluster,
        NAMESPACE,
        resource_claim("sim-gpu", device_request(selector=H200)),
        on(SIMULATED, claim_pod("sim-trainer", {"resourceClaimName": "sim-gpu"})),
    )
    wait_for(
        lambda: pod_phase(cluster, NAMESPACE, "sim-trainer") == "Running", what="the simulated pod Running"
    )
    [result] = get(cluster, "resourceclaim", "sim-gpu", "-n", NAMESPACE)["status"]["allocation"]["devices"][
        "results"
    ]
    Faults(cluster.kubectl).set_gpu_load("pod", NAMESPACE, "sim-trainer", 70)
    [(labels, _)] = wait_for(
        lambda: [
            (lb, v) for lb, v in series(fleet_port, "DCGM_FI_DEV_GPU_UTIL", pod="sim-trainer") if v == 70
        ],
        what="the simulated pod's GPU at 70 %",
        timeout=60,
    )
    assert (labels["hostname"], labels["dra_pool_name"], labels["dra_device_name"]) == (
        SIMULATED,
        SIMULATED,
        result["device"],
    )
    assert (labels["container"], labels["dra_claim_name"], labels["namespace"]) == (
        "ctr",
        "sim-gpu",
        NAMESPACE,
    )
    cluster.kubectl("delete", "pod", "sim-trainer", "-n", NAMESPACE, "--wait=true")
    wait_for(
        lambda: not series(fleet_port, "DCGM_FI_DEV_GPU_UTIL", pod="sim-trainer"),
        what="the simulated pod's labels gone",
        timeout=60,
    )
