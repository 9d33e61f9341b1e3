"""The fleet view in a real browser (Debian's chromium, selenium) against a real local cluster: kwok's
simulated H100 nodes, a static-MIG A100 and a two-node GB200 rack, the fleet publishing and preparing
for them, and `fakeplugin view` started by `cluster up --view-endpoint` as a supervised process.

Checked on the page, as a person sees it: every node and GPU, MIG partitions under their GPU, the rack
with its ComputeDomain; a pod's claim shows the pod's name on the allocated GPU's cell; an injected
XID 79 turns that cell unhealthy with the XID and the driver's health message, live (the page is never
reloaded); clearing the fault turns it back; a MIG claim shows its pod on the partition, inside its GPU.
A screenshot of the page is taken (docs/images/fleet-view.png is one of this test's).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.cluster import Cluster
from fakeplugin.testing import claim_pod, device_request, resource_claim_template
from fakeplugin.testing.faults import Faults
from tests.harness.browser import chromium
from tests.harness.host import own_cluster
from tests.harness.kube import apply, get, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NAMESPACE = "view"
H100_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
CLUSTER_UUID = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "namePrefix": "h100-",
            "replicas": 3,
            "kubelet": False,
            "gpus": [{"profile": "h100-80gb-hbm3", "count": 8}],
        },
        {
            "name": "a100-mig",
            "kubelet": False,
            "gpus": [{"profile": "a100-40gb", "count": 2, "mig": [{"profile": "1g.5gb", "count": 7}]}],
        },
        {
            "namePrefix": "gb200-rack-",
            "replicas": 2,
            "kubelet": False,
            "gpus": [{"profile": "gb200", "count": 4}],
            "fabric": {"clique": 1, "clusterUUID": CLUSTER_UUID},
        },
    ],
}


@pytest.fixture(scope="module")
def viewed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(tmp_path_factory, "view", INVENTORY, NAMESPACE, view_endpoint="127.0.0.1:0") as cluster:
        yield cluster


@pytest.fixture(scope="module")
def browser(viewed: Cluster) -> Iterator[Any]:
    with chromium(width=1600, height=960) as driver:
        driver.get(viewed.view_url)
        yield driver


def cell(browser: Any, node: str, device: str) -> Any:
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, f'.cell[data-node="{node}"][data-device="{device}"]')
    return found[0] if found else None


def wait_cell(browser: Any, node: str, device: str, state: str, *texts: str) -> Any:
    """Until the page shows the device's cell in `state` with each of `texts` (re-found: the page
    re-renders its grid on every event)."""

    def shown() -> Any:
        from selenium.common.exceptions import StaleElementReferenceException

        try:
            c = cell(browser, node, device)
            if c is not None and c.get_attribute("data-state") == state and all(t in c.text for t in texts):
                return c.text or f"({state}, no label)"  # a free partition is a bare square
        except StaleElementReferenceException:
            pass
        return None

    return wait_for(shown, what=f"the page to show {node}/{device} {state} with {texts}", timeout=60)


def api(cluster: Cluster, path: str) -> Any:
    with urllib.request.urlopen(cluster.view_url + path.lstrip("/"), timeout=10) as response:
        return json.loads(response.read())


def test_the_page_shows_every_node_gpu_partition_and_rack(viewed: Cluster, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    assert [p.name for p in viewed.status() if p.name == "view"] == ["view"]
    for node in ("h100-0", "h100-2"):
        for i in range(8):
            wait_cell(browser, node, f"gpu-{i}", "free")
    totals = browser.find_element(By.ID, "totals").text
    assert totals.startswith("6 nodes (0 not ready) · 34 GPUs · 14 MIG partitions · 34 free"), totals
    parent = wait_cell(browser, "a100-mig", "gpu-1", "free")
    assert parent.startswith("gpu-1")
    partitions = browser.find_elements(By.CSS_SELECTOR, '.cell.mig[data-node="a100-mig"]')
    assert len(partitions) == 14
    clique = f"{CLUSTER_UUID}.1"
    rack = wait_for(
        lambda: [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#racks tr[data-rack]")],
        what="the rack row",
    )
    assert rack[0].startswith(f"{clique} 2 8"), rack


def test_a_claim_then_an_xid_then_the_fault_cleared(viewed: Cluster, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    domain = {
        "apiVersion": cd_api.API_VERSION,
        "kind": cd_api.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": "rack-job"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "rack-job-channel"}}},
    }
    apply(viewed, NAMESPACE, domain)
    apply(viewed, NAMESPACE, resource_claim_template("h100", device_request(selector=H100_CEL)))
    apply(viewed, NAMESPACE, claim_pod("trainer", {"resourceClaimTemplateName": "h100"}))
    wait_for(lambda: pod_phase(viewed, NAMESPACE, "trainer") == "Running", what="pod trainer Running")
    (status,) = get(viewed, "pod", "trainer", "-n", NAMESPACE)["status"]["resourceClaimStatuses"]
    claim = get(viewed, "resourceclaim", status["resourceClaimName"], "-n", NAMESPACE)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    node, device = result["pool"], result["device"]

    wait_cell(browser, node, device, "allocated", "trainer")
    apply(viewed, NAMESPACE, resource_claim_template("mig", device_request(device_class="mig.nvidia.com")))
    apply(viewed, NAMESPACE, claim_pod("mig-worker", {"resourceClaimTemplateName": "mig"}))
    (status,) = wait_for(
        lambda: get(viewed, "pod", "mig-worker", "-n", NAMESPACE)["status"].get("resourceClaimStatuses"),
        what="the MIG pod's claim",
    )
    mig_claim = wait_for(
        lambda: get(viewed, "resourceclaim", status["resourceClaimName"], "-n", NAMESPACE)["status"].get(
            "allocation"
        ),
        what="the MIG claim allocated",
    )
    (partition,) = mig_claim["devices"]["results"]
    assert partition["pool"] == "a100-mig"
    shown = wait_cell(browser, "a100-mig", partition["device"], "allocated", "1g.5gb", "mig-worker")
    gpu = partition["device"].split("-mig-")[0]
    assert wait_cell(browser, "a100-mig", gpu, "allocated").startswith(gpu), shown  # its GPU is in use
    text = browser.find_element(By.CSS_SELECTOR, f'#domains tr[data-domain="{NAMESPACE}/rack-job"]').text
    assert text.startswith(f"{NAMESPACE}/rack-job NotReady 0 of 2"), text

    faults = Faults(viewed.kubectl)
    faults.set_device_faults(node, f"{device}=xid:79")
    started = time.monotonic()
    wait_cell(browser, node, device, "unhealthy", "trainer", "xid 79")
    seen_after = time.monotonic() - started
    assert [n["name"] for n in api(viewed, "/api/nodes?state=unhealthy")["nodes"]] == [node]
    screenshot = tmp_path / "fleet-view.png"
    browser.save_screenshot(str(screenshot))
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size < 200_000
    browser.find_element(By.CSS_SELECTOR, f'.node[data-node="{node}"] h3').click()
    row = wait_for(
        lambda: [
            r.text
            for r in browser.find_elements(By.CSS_SELECTOR, f'#detail tr[data-detail-device="{device}"]')
        ],
        what="the node's details",
    )
    assert f"{NAMESPACE}/{claim['metadata']['name']} → trainer (Running)" in row[0], row
    assert "gpu.nvidia.com/xid=79:NoSchedule — critical XID 79 reported by NVML" in row[0], row
    print(f"screenshot: {screenshot}; the XID reached the page {seen_after:.1f} s after the annotation")

    faults.clear_node(node)
    wait_cell(browser, node, device, "allocated", "trainer")
    assert api(viewed, "/api/nodes?state=unhealthy")["total"] == 0
    viewed.kubectl("delete", "pod", "trainer", "mig-worker", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    wait_cell(browser, node, device, "free")
    wait_cell(browser, "a100-mig", partition["device"], "free")


def test_the_page_refuses_writes(viewed: Cluster) -> None:
    request = urllib.request.Request(viewed.view_url + "api/summary", method="POST", data=b"{}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
