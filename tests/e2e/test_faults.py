"""Faults on demand through the Kubernetes API (fakeplugin.dev annotations), as a user sees them with the
real kubelet and scheduler: pod events and phases, the call log, ResourceSlice taints, pod health.

A pod whose Prepare failed was not prepared again within 40 s by the 1.35 kubelet in this cluster (its pod
sync backoff, pkg/kubelet/kubelet.go backOffPeriod = 10s, did not bring a new NodePrepareResources), so
the Prepare tests delete and recreate the pod to get the next attempt, as a user's controller would.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.cluster import versions
from fakeplugin.faults import claimfaults, devicefaults
from fakeplugin.testing import claim_pod, device_request, resource_claim, resource_claim_template
from tests.harness.kube import apply, get, health_watched_claim, items, pod_claim_name, pod_phase, wait_for
from tests.harness.seedlab import T10

pytestmark = pytest.mark.cluster

T10_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"
RETRY = 60  # seconds: a few of the kubelet's retries


def t10_claim(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return resource_claim(name, device_request(selector=T10_CEL), annotations=annotations)


def fault(cluster: Any, *args: str) -> str:
    """`fakeplugin fault` against the local cluster, as a user runs it."""
    argv = [sys.executable, "-m", "fakeplugin", "fault", "--kubeconfig", str(cluster.kubeconfig), *args]
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def prepare_events(cluster: Any, namespace: str, pod_uid: str) -> list[str]:
    events = items(cluster, "events", "-n", namespace, "--field-selector", f"involvedObject.uid={pod_uid}")
    return [e["message"] for e in events if e["reason"] == "FailedPrepareDynamicResources"]


def start_pod(cluster: Any, namespace: str) -> str:
    """Pod `p` using claim `c`; its UID."""
    apply(cluster, namespace, claim_pod("p", {"resourceClaimName": "c"}))
    return get(cluster, "pod", "p", "-n", namespace)["metadata"]["uid"]


def delete_pod(cluster: Any, namespace: str, pod: str) -> None:
    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=true", "--timeout=60s")


def test_prepare_error_until_the_annotation_is_removed(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, t10_claim("c", {"fakeplugin.dev/prepare-error": "injected: GPU is busy"}))
    uid = start_pod(cluster, namespace)

    messages = wait_for(lambda: prepare_events(cluster, namespace, uid), what="FailedPrepareDynamicResources")
    assert "injected: GPU is busy" in messages[0]
    assert pod_phase(cluster, namespace, "p") == "Pending"

    assert "removed" in fault(cluster, "claim", f"{namespace}/c", "--clear")
    delete_pod(cluster, namespace, "p")
    start_pod(cluster, namespace)
    wait_for(lambda: pod_phase(cluster, namespace, "p") == "Running", what="pod Running", timeout=RETRY)
    delete_pod(cluster, namespace, "p")


def test_prepare_fail_count_fails_twice_then_succeeds(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, t10_claim("c", {"fakeplugin.dev/prepare-fail-count": "2"}))
    for _ in range(2):
        uid = start_pod(cluster, namespace)
        wait_for(
            lambda uid=uid: prepare_events(cluster, namespace, uid), what="FailedPrepareDynamicResources"
        )
        delete_pod(cluster, namespace, "p")
    start_pod(cluster, namespace)
    wait_for(lambda: pod_phase(cluster, namespace, "p") == "Running", what="pod Running", timeout=RETRY)

    node = get(cluster, "pod", "p", "-n", namespace)["spec"]["nodeName"]
    calls = cluster.calls(node, claim=f"{namespace}/c", method="NodePrepareResources")
    assert [c["result"] for c in calls[:3]] == ["error", "error", "ok"]
    errors = [next(iter(c["error"].values())) for c in calls[:2]]
    assert "prepare-fail-count: attempt 1 of 2 fails" in errors[0]
    assert "prepare-fail-count: attempt 2 of 2 fails" in errors[1]
    delete_pod(cluster, namespace, "p")


def test_prepare_delay_leaves_getinfo_answering(cluster: Any, namespace: str) -> None:
    apply(cluster, namespace, t10_claim("c", {"fakeplugin.dev/prepare-delay": "6s"}))
    apply(cluster, namespace, claim_pod("p", {"resourceClaimName": "c"}))
    node = wait_for(
        lambda: get(cluster, "pod", "p", "-n", namespace)["spec"].get("nodeName"), what="scheduled"
    )
    wait_for(lambda: _waiting(cluster, node, namespace), what="the plugin waiting in Prepare", timeout=30)
    socket = cluster.node_dirs(node).registrar_dir / "gpu.nvidia.com-reg.sock"
    started = time.monotonic()
    with grpc.insecure_channel(f"unix:{socket}") as channel:
        info = reg_grpc.RegistrationStub(channel).GetInfo(reg_pb2.InfoRequest(), timeout=5)
    assert info.name == "gpu.nvidia.com"
    assert time.monotonic() - started < 1.0  # while the claim's Prepare waits its 6 s
    assert pod_phase(cluster, namespace, "p") == "Pending"

    wait_for(lambda: pod_phase(cluster, namespace, "p") == "Running", what="pod Running", timeout=RETRY)
    [call] = cluster.calls(node, claim=f"{namespace}/c", method="NodePrepareResources")
    assert call["result"] == "ok" and call["durationMs"] >= 6000
    delete_pod(cluster, namespace, "p")


def _waiting(cluster: Any, node: str, namespace: str) -> bool:
    """Whether the plugin logged that this namespace's claim waits its prepare-delay."""
    text = _plugin_log(cluster, node)
    return f"prepare {namespace}/c:" in text and "prepare-delay: waiting" in text


@pytest.fixture
def t10_unprepare_faults(cluster: Any) -> Iterator[str]:
    """T10 with fakeplugin.dev/unprepare-faults: its plugin reads every Unprepare's claim, so an
    unprepare-error added after Prepare applies; once its plugin logged that it saw the annotation."""
    cluster.kubectl("annotate", "node", T10, "--overwrite", f"{claimfaults.UNPREPARE_FAULTS}=true")
    try:
        wait_for(
            lambda: f"{claimfaults.UNPREPARE_FAULTS} set" in _plugin_log(cluster, T10),
            what="the plugin seeing the node's unprepare-faults annotation",
            timeout=30,
        )
        yield T10
    finally:
        cluster.kubectl("annotate", "node", T10, f"{claimfaults.UNPREPARE_FAULTS}-")


def _plugin_log(cluster: Any, node: str) -> str:
    log = cluster.layout.log(f"plugin/{node}")
    return log.read_text(errors="replace") if log.exists() else ""


def test_unprepare_error_keeps_the_pod_terminating(
    cluster: Any, namespace: str, t10_unprepare_faults: str
) -> None:
    apply(cluster, namespace, t10_claim("c", {}))
    apply(cluster, namespace, claim_pod("p", {"resourceClaimName": "c"}))
    wait_for(lambda: pod_phase(cluster, namespace, "p") == "Running", what="pod Running")
    node = get(cluster, "pod", "p", "-n", namespace)["spec"]["nodeName"]
    assert node == t10_unprepare_faults
    # Added while the pod runs: read at Unprepare because the node opted in.
    fault(cluster, "claim", f"{namespace}/c", "--unprepare-error", "injected: cannot reset GPU")

    cluster.kubectl("delete", "pod", "p", "-n", namespace, "--wait=false")

    def failed_unprepares() -> list[dict[str, Any]]:
        calls = cluster.calls(node, claim=f"{namespace}/c", method="NodeUnprepareResources")
        return [c for c in calls if c["result"] == "error"]

    [first, *_] = wait_for(failed_unprepares, what="a failed NodeUnprepareResources", timeout=RETRY)
    assert "injected: cannot reset GPU" in next(iter(first["error"].values()))
    pod = get(cluster, "pod", "p", "-n", namespace)
    assert pod["metadata"].get("deletionTimestamp"), "the pod is Terminating"

    fault(cluster, "claim", f"{namespace}/c", "--clear")
    wait_for(
        lambda: not items(cluster, "pods", "-n", namespace, "--field-selector", "metadata.name=p"),
        what="the pod gone",
        timeout=RETRY,
    )


@pytest.fixture
def t10_with_health(cluster: Any) -> Iterator[str]:
    cluster.restart_plugin(T10, args=["--device-health", "--feature-gates=NVMLDeviceHealthCheck=true"])
    yield T10
    cluster.kubectl("annotate", "node", T10, "fakeplugin.dev/device-faults-")
    cluster.restart_plugin(T10, args=[])


def device_taints(cluster: Any, node: str) -> dict[str, list[dict[str, str]]]:
    slices = items(cluster, "resourceslices", "--field-selector", f"spec.nodeName={node}")
    return {
        d["name"]: [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in d.get("taints") or []]
        for s in slices
        for d in s["spec"].get("devices") or []
    }


def test_node_xid_taints_the_device_and_healing_restores_it(
    cluster: Any, namespace: str, t10_with_health: str
) -> None:
    node = t10_with_health
    t10 = device_request(selector=T10_CEL)
    template = resource_claim_template("t10", t10)
    watched, entry = health_watched_claim(cluster, "t10-first", t10)  # its health is checked below
    apply(cluster, namespace, template, watched, claim_pod("first", entry))
    wait_for(lambda: pod_phase(cluster, namespace, "first") == "Running", what="pod Running")
    claim = get(cluster, "resourceclaim", pod_claim_name(cluster, namespace, "first"), "-n", namespace)
    [result] = claim["status"]["allocation"]["devices"]["results"]
    broken, other = result["device"], {"gpu-0": "gpu-1", "gpu-1": "gpu-0"}[result["device"]]

    fault(cluster, "node", node, "--xid", f"{broken}=79")
    xid79 = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    wait_for(lambda: device_taints(cluster, node)[broken] == xid79, what="the xid taint", timeout=30)
    assert device_taints(cluster, node)[other] == []

    def health() -> list[str]:
        statuses = get(cluster, "pod", "first", "-n", namespace)["status"].get("containerStatuses", [])
        return [
            r["health"]
            for c in statuses
            for s in c.get("allocatedResourcesStatus") or []
            for r in s["resources"]
        ]

    wait_for(lambda: health() == ["Unhealthy"], what="the device Unhealthy in the pod status", timeout=60)

    apply(cluster, namespace, claim_pod("second", {"resourceClaimTemplateName": "t10"}))
    wait_for(lambda: pod_phase(cluster, namespace, "second") == "Running", what="second pod Running")
    [second_claim] = [
        s["resourceClaimName"]
        for s in get(cluster, "pod", "second", "-n", namespace)["status"]["resourceClaimStatuses"]
    ]
    second = get(cluster, "resourceclaim", second_claim, "-n", namespace)
    assert [r["device"] for r in second["status"]["allocation"]["devices"]["results"]] == [other]

    fault(cluster, "node", node, "--xid", f"{broken}=13")  # an XID the real driver ignores
    xid13 = [{"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}]
    if versions.server_version(cluster.local.kubernetes_version) < devicefaults.EFFECT_NONE_SINCE:
        xid13 = []  # no `None` effect before 1.35: the skipped XID leaves no taint
    wait_for(
        lambda: device_taints(cluster, node)[broken] == xid13, what="the ignored xid's taint", timeout=30
    )
    # Unhealthy is sticky (PR #1243 updateDeviceHealth): neither the skipped XID nor clearing the fault
    # heals it; only a plugin restart does. The plugin reports every 10 s: watch past two reports.
    fault(cluster, "node", node, "--clear")
    wait_for(lambda: device_taints(cluster, node)[broken] == [], what="the taint removed", timeout=30)
    for _ in range(25):
        assert health() == ["Unhealthy"]
        time.sleep(1)


def test_a_toleration_lets_a_claim_take_a_tainted_device(
    cluster: Any, namespace: str, t10_with_health: str
) -> None:
    """The scheduler keeps claims off a NoSchedule device taint unless the request tolerates it (KEP-5055;
    beta in 1.36, GA in 1.37, locked in 1.38): both claims pin gpu-1 of the T10 node, only the tolerating
    one gets it."""
    node = t10_with_health
    fault(cluster, "node", node, "--xid", "gpu-1=79")
    xid79 = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    wait_for(lambda: device_taints(cluster, node)["gpu-1"] == xid79, what="the xid taint", timeout=30)

    pinned = f"{T10_CEL} && device.attributes['gpu.nvidia.com'].uuid == '{gpu_uuid(cluster, node, 'gpu-1')}'"

    def claim(name: str, tolerations: list[dict[str, str]]) -> dict[str, Any]:
        return resource_claim(name, device_request(selector=pinned, tolerations=tolerations))

    tolerate_xid = [{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}]
    apply(cluster, namespace, claim("plain", []), claim_pod("plain", {"resourceClaimName": "plain"}))
    apply(
        cluster,
        namespace,
        claim("tolerant", tolerate_xid),
        claim_pod("tolerant", {"resourceClaimName": "tolerant"}),
    )
    wait_for(
        lambda: pod_phase(cluster, namespace, "tolerant") == "Running", what="the tolerating pod Running"
    )
    [result] = get(cluster, "resourceclaim", "tolerant", "-n", namespace)["status"]["allocation"]["devices"][
        "results"
    ]
    # The result echoes the tolerations from 1.35; 1.34's left them out (hack/matrix.sh runs).
    assert (result["pool"], result["device"]) == (node, "gpu-1")

    def unschedulable() -> str:
        conditions = get(cluster, "pod", "plain", "-n", namespace)["status"].get("conditions") or []
        return next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")

    assert "cannot allocate all claims" in wait_for(unschedulable, what="the plain pod unschedulable")
    assert pod_phase(cluster, namespace, "plain") == "Pending"
    assert "allocation" not in get(cluster, "resourceclaim", "plain", "-n", namespace).get("status", {})


def gpu_uuid(cluster: Any, node: str, device: str) -> str:
    slices = items(cluster, "resourceslices", "--field-selector", f"spec.nodeName={node}")
    [uuid] = [
        d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"].get("devices") or []
        if d["name"] == device
    ]
    return uuid


def test_a_template_s_fault_reaches_the_claims_made_from_it(cluster: Any, namespace: str) -> None:
    template = resource_claim_template(
        "t",
        device_request(selector=T10_CEL),
        annotations={"fakeplugin.dev/prepare-error": "injected from the template"},
    )
    apply(cluster, namespace, template, claim_pod("p", {"resourceClaimTemplateName": "t"}))
    uid = get(cluster, "pod", "p", "-n", namespace)["metadata"]["uid"]

    messages = wait_for(lambda: prepare_events(cluster, namespace, uid), what="FailedPrepareDynamicResources")
    assert "injected from the template" in messages[0]
    (generated,) = items(cluster, "resourceclaims", "-n", namespace)
    assert (
        generated["metadata"]["annotations"]["fakeplugin.dev/prepare-error"] == "injected from the template"
    )
    delete_pod(cluster, namespace, "p")
