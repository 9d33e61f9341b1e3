"""End-to-end ComputeDomains on a local cluster as `fakeplugin cluster up` deploys them for an inventory
with a fabric: the CRDs, classes and controller, the compute-domain.nvidia.com plugin with
`--emulate-daemon` beside the GPU plugin. NVIDIA's own demo specs (tests/data/nvidia-demo-specs, copied
unchanged) run as NVIDIA's tests/bats/test_cd_imex_chan_inject.bats and test_cd_misc.bats run them on
real GB200 racks: the pod gets its IMEX channel(s), the ComputeDomain turns Ready with the node in
status.nodes, and after the pod is deleted the node leaves status.nodes and the single-node ComputeDomain
is NotReady. The unknown-opaque-field case is test_cd_misc.bats's "reject unknown field in opaque cfg in
CD chan ResourceClaim"; the node fault fakeplugin.dev/compute-domain-daemon-not-ready is ours.

The session's seed lab has no fabric, so this module starts its own cluster: one kubelet node with four
GB200 in NVLink clique 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import Cluster
from fakeplugin.faults.daemonfaults import NOT_READY_ANNOTATION
from fakeplugin.testing import container, device_request, opaque_config, pod, resource_claim
from tests.harness.domains import CHANNEL_INJECTION, SPECS, cd_status, channel_injection_ran
from tests.harness.host import own_cluster
from tests.harness.kube import apply, apply_file, get, items, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NODE = "gb200-tray-0"
CLUSTER_UUID = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
NAMESPACE = "cd-e2e"
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "name": NODE,
            "gpus": [{"profile": "gb200", "count": 4}],
            "fabric": {"clique": 1, "clusterUUID": CLUSTER_UUID},
        }
    ],
}


@pytest.fixture(scope="module")
def cd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with own_cluster(tmp_path_factory, "cd", INVENTORY, NAMESPACE) as cluster:
        yield cluster


def test_the_cluster_deploys_the_compute_domain_side(cd_cluster: Cluster) -> None:
    node = get(cd_cluster, "node", NODE)
    assert node["metadata"]["labels"][api.GPU_CLIQUE_LABEL] == f"{CLUSTER_UUID}.1"
    classes = {c["metadata"]["name"] for c in items(cd_cluster, "deviceclasses")}
    assert {api.DEFAULT_CHANNEL_CLASS, api.DAEMON_CLASS} <= classes
    drivers = {(s["spec"]["driver"], s["spec"]["nodeName"]) for s in items(cd_cluster, "resourceslices")}
    assert {("gpu.nvidia.com", NODE), (api.DRIVER_NAME, NODE)} <= drivers


@pytest.mark.parametrize(("spec", "channel"), CHANNEL_INJECTION)
def test_nvidias_channel_injection_demo(cd_cluster: Cluster, spec: str, channel: str) -> None:
    cd, workload = apply_file(cd_cluster, NAMESPACE, SPECS / spec)
    entry = channel_injection_ran(
        cd_cluster, NAMESPACE, cd["metadata"]["name"], workload["metadata"]["name"], channel
    )
    assert (entry["name"], entry["cliqueID"]) == (NODE, f"{CLUSTER_UUID}.1")


def test_the_not_ready_fault_keeps_the_nodes_daemon_not_ready(cd_cluster: Cluster) -> None:
    cd_cluster.kubectl("annotate", "node", NODE, f"{NOT_READY_ANNOTATION}=e2e", "--overwrite")
    cd, workload = apply_file(cd_cluster, NAMESPACE, SPECS / "channel-injection.yaml")
    name, pod_name = cd["metadata"]["name"], workload["metadata"]["name"]

    def node_status(want: str) -> dict[str, Any] | None:
        s = cd_status(cd_cluster, NAMESPACE, name)
        return s if [n.get("status") for n in s.get("nodes") or []] == [want] else None

    try:
        status = wait_for(lambda: node_status("NotReady"), what="the node listed NotReady", timeout=120)
        assert status["status"] == api.STATUS_NOT_READY
        assert pod_phase(cd_cluster, NAMESPACE, pod_name) == "Pending"  # its channel claim waits
    finally:
        cd_cluster.kubectl("annotate", "node", NODE, f"{NOT_READY_ANNOTATION}-")
    wait_for(lambda: node_status("Ready"), what="the node Ready once the fault is gone", timeout=60)
    cd_cluster.kubectl("delete", "pod", pod_name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    cd_cluster.kubectl("delete", "computedomain", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


def test_an_unknown_opaque_field_is_refused_with_nvidias_text(cd_cluster: Cluster) -> None:
    parameters = {
        "apiVersion": api.API_VERSION,
        "domainID": "not-needed-for-test",
        "kind": api.CHANNEL_CONFIG_KIND,
        "unexpectedField": "foo",
    }
    claim = resource_claim(
        "rc-bad-opaque-config",
        device_request("chan", device_class=api.DEFAULT_CHANNEL_CLASS),
        config=[opaque_config(parameters, requests=["chan"], driver=api.DRIVER_NAME)],
    )
    workload = pod(
        "pod-boc",
        [container("app", claims=["claim-boc"], image="busybox")],
        claims={"claim-boc": {"resourceClaimName": "rc-bad-opaque-config"}},
    )
    apply(cd_cluster, NAMESPACE, claim, workload)
    uid = get(cd_cluster, "pod", "pod-boc", "-n", NAMESPACE)["metadata"]["uid"]

    def failures() -> list[str]:
        events = items(cd_cluster, "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.uid={uid}")
        return [e["message"] for e in events if e.get("reason") == "FailedPrepareDynamicResources"]

    messages = wait_for(failures, what="a FailedPrepareDynamicResources event for pod-boc", timeout=120)
    assert any(
        "error preparing devices" in m and 'strict decoding error: unknown field "unexpectedField"' in m
        for m in messages
    ), messages
    cd_cluster.kubectl("delete", "pod", "pod-boc", "-n", NAMESPACE, "--wait=true", "--timeout=60s")
    cd_cluster.kubectl("delete", "resourceclaim", "rc-bad-opaque-config", "-n", NAMESPACE)
