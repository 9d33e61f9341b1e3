"""Real Prometheus (`cluster up --with prometheus`: Debian's server, the rules of examples/prometheus/) on our
telemetry, asked only through its HTTP API (/api/v1/targets, query, alerts, rules), as a user's dashboards
and alert rules written for dcgm-exporter ask it.

One cluster for the module: a kubelet node with two H200s (its plugin's endpoint, attribution from the real
kubelet's PodResources API) and a simulated H200 node (the fleet's endpoint). Checked: every endpoint up;
a claim pod's series carry its pod, namespace, container and dra_* labels (on the kubelet node, and through
the fleet on the simulated one), and lose them when it is deleted; dcgm-exporter's Grafana panels answer;
a load of 90 % moves DCGM_FI_DEV_GPU_UTIL and the per-namespace recording rules; the XID alert fires after
an injected XID and clears after the fault is removed. Everything is polled with a deadline:
Prometheus scrapes and evaluates every 2 s.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cluster import prometheus
from fakeplugin.cluster.processes import ProcessRecord, is_running, processes_of
from fakeplugin.testing import FakepluginCluster, claim_pod, resource_claim
from tests.harness.dashboard import DASHBOARD_PANELS
from tests.harness.docblocks import Ref, block
from tests.harness.host import require_cluster_host, require_prometheus
from tests.harness.kube import wait_for

pytestmark = pytest.mark.cluster

NODE = "gpu-node"
SIMULATED = "sim-gpu"
NAMESPACE = "team-a"
OTHER = "team-b"
TIMEOUT = 60.0  # seconds: many scrape and evaluation intervals
DOC_QUERIES = Ref("docs/prometheus.md", 'DCGM_FI_DEV_GPU_UTIL{namespace="team-a"}')
INVENTORY = {
    "driverVersion": "580.159.04",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {"name": NODE, "gpus": [{"profile": "h200", "count": 2}]},
        {"name": SIMULATED, "kubelet": False, "gpus": [{"profile": "h200", "count": 1}]},
    ],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakepluginCluster]:
    request = require_prometheus()
    require_cluster_host()
    inventory = tmp_path_factory.mktemp("prometheus") / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(INVENTORY, sort_keys=False))
    state = Path(tempfile.mkdtemp(prefix="fp-", dir="/tmp"))  # short: the kubelet's sockets live below it
    try:
        with FakepluginCluster.start(inventory, state, prometheus=request) as c:
            c.kubectl("create", "namespace", NAMESPACE)
            c.kubectl("create", "namespace", OTHER)
            records = json.loads((state / "cluster.json").read_text())["processes"]
            (server,) = [ProcessRecord.from_json(p) for p in records if p["name"] == prometheus.NAME]
            yield c
        # `down` stopped it (before the plugins) and removed its config and TSDB with the state.
        assert not is_running(server) and processes_of(state) == []
        assert not (state / "prometheus").exists()
    finally:
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def url(cluster: FakepluginCluster) -> str:
    found = cluster.local.prometheus_url
    assert found is not None and found.startswith("http://127.0.0.1:")
    return found


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's samples: [{"metric": labels, "value": [time, "value"]}, ...]."""
    data = prometheus.api(url, "query", query=promql)
    assert data["resultType"] == "vector"
    return data["result"]


def value(sample: dict[str, Any]) -> float:
    return float(sample["value"][1])


def running_claim_pod(cluster: FakepluginCluster, namespace: str, name: str, node: str) -> dict[str, str]:
    """Pod `name` on `node` with claim `<name>-gpu` (one H200), running: the device, pool and UUID it got."""
    cluster.apply(resource_claim(f"{name}-gpu"), namespace)
    pod = claim_pod(name, {"resourceClaimName": f"{name}-gpu"})
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    cluster.apply(pod, namespace)
    cluster.wait_for_pod(namespace, name)
    (allocated,) = cluster.allocation(namespace, f"{name}-gpu")
    slices = cluster.get("resourceslices")["items"]
    (device,) = [
        d
        for s in slices
        if s["spec"].get("nodeName") == node
        for d in s["spec"]["devices"]
        if d["name"] == allocated.device
    ]
    return {
        "device": allocated.device,
        "pool": allocated.pool,
        "uuid": device["attributes"]["uuid"]["string"],
    }


@pytest.fixture(scope="module")
def claim_pod_on_node(cluster: FakepluginCluster) -> dict[str, str]:
    """Pod `train` of NAMESPACE on the kubelet node (its plugin's endpoint, the kubelet's PodResources)."""
    return running_claim_pod(cluster, NAMESPACE, "train", NODE)


@pytest.fixture(scope="module")
def claim_pod_simulated(cluster: FakepluginCluster) -> dict[str, str]:
    """Pod `infer` of OTHER on the simulated node (the fleet's endpoint, uses derived from its claims)."""
    return running_claim_pod(cluster, OTHER, "infer", SIMULATED)


def test_every_telemetry_endpoint_is_a_target_that_is_up(cluster: FakepluginCluster, url: str) -> None:
    active = prometheus.api(url, "targets", state="active")["activeTargets"]
    assert {t["labels"]["fakeplugin_process"] for t in active} == {f"plugin/{NODE}", "fleet"}
    assert {t["health"] for t in active} == {"up"}
    assert {t["scrapePool"] for t in active} == {"fakeplugin"}
    assert all(p.running for p in cluster.local.status())
    status = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "cluster", "status", f"--state-dir={cluster.layout.root}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    assert f"prometheus: {url}\n" in status.stdout
    assert re.search(r"^prometheus +pid \d+ +running", status.stdout, re.MULTILINE), status.stdout
    per_node = wait_for(
        lambda: (
            {
                s["metric"]["hostname"]: value(s)
                for s in query(url, "count by (hostname) (DCGM_FI_DEV_GPU_UTIL)")
            }
            or None
        ),
        what="GPU series of both nodes",
        timeout=TIMEOUT,
    )
    assert per_node == {NODE: 2.0, SIMULATED: 1.0}


def test_a_claim_pods_gpu_carries_its_pod_and_claim_as_scraped(
    url: str, claim_pod_on_node: dict[str, str]
) -> None:
    device = claim_pod_on_node
    (sample,) = wait_for(
        lambda: query(url, f'DCGM_FI_DEV_GPU_UTIL{{pod="train",namespace="{NAMESPACE}"}}') or None,
        what="the pod's GPU series",
        timeout=TIMEOUT,
    )
    labels = sample["metric"]
    assert {k: labels.get(k) for k in ("hostname", "UUID", "namespace", "pod", "container")} == {
        "hostname": NODE,
        "UUID": device["uuid"],
        "namespace": NAMESPACE,
        "pod": "train",
        "container": "ctr",
    }
    assert {k: labels.get(k) for k in ("dra_claim_name", "dra_claim_namespace", "dra_driver_name")} == {
        "dra_claim_name": "train-gpu",
        "dra_claim_namespace": NAMESPACE,
        "dra_driver_name": "gpu.nvidia.com",
    }
    assert (labels.get("dra_pool_name"), labels.get("dra_device_name")) == (device["pool"], device["device"])
    assert labels["job"] == "fakeplugin" and labels["fakeplugin_process"] == f"plugin/{NODE}"
    # The other GPU of the node is free: its series have no pod.
    (free,) = query(url, f'DCGM_FI_DEV_GPU_UTIL{{hostname="{NODE}",UUID!="{device["uuid"]}"}}')
    assert "pod" not in free["metric"] and value(free) == 0.0


def test_a_simulated_nodes_claim_pod_is_attributed_through_the_fleet(
    url: str, claim_pod_simulated: dict[str, str]
) -> None:
    device = claim_pod_simulated
    (sample,) = wait_for(
        lambda: query(url, f'DCGM_FI_DEV_GPU_UTIL{{pod="infer",namespace="{OTHER}"}}') or None,
        what="the simulated pod's GPU series",
        timeout=TIMEOUT,
    )
    labels = sample["metric"]
    assert {k: labels.get(k) for k in ("hostname", "UUID", "container", "fakeplugin_process")} == {
        "hostname": SIMULATED,
        "UUID": device["uuid"],
        "container": "ctr",
        "fakeplugin_process": "fleet",
    }
    assert (labels.get("dra_claim_name"), labels.get("dra_device_name")) == ("infer-gpu", device["device"])


def test_dcgm_exporters_dashboard_and_the_docs_queries_answer(
    url: str, claim_pod_on_node: dict[str, str]
) -> None:
    """dcgm-exporter's own Grafana dashboard, unchanged: every GPU of both nodes in each per-GPU panel."""
    instances = prometheus.api(url, "label/instance/values", **{"match[]": "DCGM_FI_DEV_GPU_TEMP"})
    assert len(instances) == 2  # the plugin's endpoint and the fleet's
    for expr in DASHBOARD_PANELS:
        promql = expr.replace("$instance", "|".join(instances)).replace("$gpu", ".*")
        samples = query(url, promql)
        assert len(samples) == (1 if expr.startswith(("avg(", "sum(")) else 3), promql
        assert all(value(s) >= 0.0 for s in samples), promql
    for line in block(DOC_QUERIES).text.splitlines():
        assert wait_for(lambda line=line: query(url, line), what=line, timeout=TIMEOUT)


def test_a_load_of_90_percent_moves_utilisation_and_the_namespace_rule(
    cluster: FakepluginCluster,
    url: str,
    claim_pod_on_node: dict[str, str],
    claim_pod_simulated: dict[str, str],
) -> None:
    cluster.faults.set_gpu_load("pod", NAMESPACE, "train", 90)  # fakeplugin.dev/gpu-load: utilization=90
    util = f'DCGM_FI_DEV_GPU_UTIL{{UUID="{claim_pod_on_node["uuid"]}"}}'
    wait_for(
        lambda: [s for s in query(url, util) if value(s) == 90.0], what=f"{util} at 90 %", timeout=TIMEOUT
    )
    (recorded,) = wait_for(
        lambda: [
            s
            for s in query(url, f'namespace:DCGM_FI_DEV_GPU_UTIL:avg{{namespace="{NAMESPACE}"}}')
            if value(s) == 90.0
        ],
        what="the recording rule's per-namespace average at 90",
        timeout=TIMEOUT,
    )
    assert recorded["metric"] == {"__name__": "namespace:DCGM_FI_DEV_GPU_UTIL:avg", "namespace": NAMESPACE}
    # One series per namespace: team-b's GPU (on the simulated node) idle beside team-a's.
    gpus = {s["metric"]["namespace"]: value(s) for s in query(url, "namespace:gpus:count")}
    assert gpus == {NAMESPACE: 1.0, OTHER: 1.0}
    (other,) = query(url, f'namespace:DCGM_FI_DEV_GPU_UTIL:avg{{namespace="{OTHER}"}}')
    assert value(other) == 0.0
    (fb,) = query(url, f'namespace:DCGM_FI_DEV_FB_USED:sum{{namespace="{NAMESPACE}"}}')
    assert value(fb) > 0.0
    groups = {g["name"]: g for g in prometheus.api(url, "rules")["groups"]}
    assert set(groups) == {"gpu-health", "gpu-namespace"}
    assert {r["health"] for g in groups.values() for r in g["rules"]} == {"ok"}
    cluster.faults.clear_gpu_load("pod", NAMESPACE, "train")
    wait_for(
        lambda: [s for s in query(url, util) if value(s) < 90.0], what=f"{util} idle again", timeout=TIMEOUT
    )


def firing(url: str, uuid: str) -> list[dict[str, Any]]:
    return [
        a
        for a in prometheus.api(url, "alerts")["alerts"]
        if a["labels"]["alertname"] == "GPUXidError"
        and a["labels"].get("UUID") == uuid
        and a["state"] == "firing"
    ]


def test_the_xid_alert_fires_on_an_injected_xid_and_clears_after(
    cluster: FakepluginCluster, url: str, claim_pod_on_node: dict[str, str]
) -> None:
    uuid = claim_pod_on_node["uuid"]
    assert firing(url, uuid) == []
    cluster.faults.set_device_faults(NODE, f"{claim_pod_on_node['device']}=xid:79")
    try:
        (alert,) = wait_for(lambda: firing(url, uuid), what="GPUXidError firing", timeout=TIMEOUT)
        assert alert["labels"]["hostname"] == NODE and alert["labels"]["pod"] == "train"
        assert alert["labels"]["severity"] == "critical"
        assert float(alert["value"]) == 79.0
        assert alert["annotations"]["summary"].endswith(f"of {NODE} reported XID 79")
    finally:
        cluster.faults.clear_node(NODE)
    wait_for(lambda: not firing(url, uuid), what="GPUXidError cleared", timeout=TIMEOUT)
    (xid,) = query(url, f'DCGM_FI_DEV_XID_ERRORS{{UUID="{uuid}"}}')
    assert value(xid) == 0.0


def test_a_deleted_pods_gpu_loses_its_labels(
    cluster: FakepluginCluster, url: str, claim_pod_on_node: dict[str, str]
) -> None:
    uuid = claim_pod_on_node["uuid"]
    cluster.kubectl("delete", "pod", "train", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    (sample,) = wait_for(
        lambda: [s for s in query(url, f'DCGM_FI_DEV_GPU_UTIL{{UUID="{uuid}"}}') if "pod" not in s["metric"]],
        what="the GPU's series without the deleted pod",
        timeout=TIMEOUT,
    )
    assert not {k for k in sample["metric"] if k.startswith("dra_") or k in ("namespace", "container")}
