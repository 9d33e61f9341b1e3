"""End-to-end KEP-5007 binding conditions of ComputeDomain channel devices (`cluster up
--binding-conditions`, ours: beyond NVIDIA's releases, docs/compute-domains.md *Binding conditions*), with
the real kube-scheduler's DynamicResources plugin (kubernetes/kubernetes v1.37.2
`pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go`: PreBind waits, polling every 5 s,
until the allocated devices' binding conditions are True; a True binding-failure condition ends the wait
with "device binding failed", and the next cycle's PostFilter deallocates the claim).

Only where the scheduler has the gate DRADeviceBindingConditions on: beta and on by default in 1.36 and
1.37, GA in 1.38 (docs/kubernetes-versions.md); on 1.34/1.35 (alpha, off) the API server drops the fields,
so its tests skip there (before a cluster starts). hack/test.sh runs it in its `versions` tier.

Its own cluster: one kubelet node with four GB200 in NVLink clique 1, ComputeDomain side with
--binding-conditions, the scheduler's bindingTimeout BINDING_TIMEOUT seconds (`cluster up
--binding-timeout`; the default 600 s is too long for a test).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from fakeplugin.apis import computedomain as api
from fakeplugin.cluster import Cluster, versions
from fakeplugin.faults.daemonfaults import FAILED_ANNOTATION, NOT_READY_ANNOTATION
from tests.harness.host import own_cluster
from tests.harness.kube import apply, get, items, pod_claim_name, pod_phase, wait_for

pytestmark = pytest.mark.cluster

NODE = "gb200-tray-0"
NAMESPACE = "bc-e2e"
# Long enough for the daemon to start and the wait test to watch two of the scheduler's 5 s polls.
BINDING_TIMEOUT = 60
INVENTORY = {
    "driverVersion": "580.126.20",
    "cudaDriverVersion": "13.0",
    "nodes": [
        {
            "name": NODE,
            "gpus": [{"profile": "gb200", "count": 4}],
            "fabric": {"clique": 1, "clusterUUID": "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"},
        }
    ],
}


@pytest.fixture(scope="module")
def bc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    if versions.server_version(versions.selected()) < (1, 36):
        pytest.skip(
            "DRADeviceBindingConditions is alpha and off before Kubernetes 1.36 (docs/kubernetes-versions.md)"
        )
    up = {"binding_conditions": True, "binding_timeout": BINDING_TIMEOUT}
    with own_cluster(tmp_path_factory, "bc", INVENTORY, NAMESPACE, **up) as cluster:
        yield cluster


def workload(name: str) -> list[dict[str, Any]]:
    """A single-node ComputeDomain and a pod of its channel template (as NVIDIA's channel-injection demo)."""
    cd = {
        "apiVersion": api.API_VERSION,
        "kind": api.COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "ctr", "image": "busybox", "resources": {"claims": [{"name": "chan"}]}}],
            "resourceClaims": [{"name": "chan", "resourceClaimTemplateName": f"{name}-channel"}],
        },
    }
    return [cd, pod]


def channel_conditions(cluster: Cluster, pod: str) -> dict[str, dict[str, Any]]:
    """Our conditions in the pod's channel claim's status.devices ({} before the claim exists or has any)."""
    if not (get(cluster, "pod", pod, "-n", NAMESPACE).get("status") or {}).get("resourceClaimStatuses"):
        return {}
    claim = get(cluster, "resourceclaim", pod_claim_name(cluster, NAMESPACE, pod), "-n", NAMESPACE)
    entries = [d for d in (claim.get("status") or {}).get("devices") or [] if d["driver"] == api.DRIVER_NAME]
    return {c["type"]: c for e in entries for c in e.get("conditions") or []}


def pod_events(cluster: Cluster, pod: str) -> list[dict[str, Any]]:
    uid = get(cluster, "pod", pod, "-n", NAMESPACE)["metadata"]["uid"]
    return items(cluster, "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.uid={uid}")


def times(event: dict[str, Any]) -> int:
    """How often the event happened (core/v1 count, or the events.k8s.io series' count)."""
    return max(int(event.get("count") or 1), int((event.get("series") or {}).get("count") or 1))


def node_name(cluster: Cluster, pod: str) -> str:
    return get(cluster, "pod", pod, "-n", NAMESPACE)["spec"].get("nodeName", "")


def delete(cluster: Cluster, name: str) -> None:
    cluster.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")
    cluster.kubectl("delete", "computedomain", name, "-n", NAMESPACE, "--wait=true", "--timeout=120s")


@contextmanager
def node_fault(cluster: Cluster, annotation: str, value: str) -> Iterator[None]:
    """NODE carries the fault annotation (docs/faults.md) for the block's duration."""
    cluster.kubectl("annotate", "node", NODE, f"{annotation}={value}", "--overwrite")
    try:
        yield
    finally:
        cluster.kubectl("annotate", "node", NODE, f"{annotation}-")


def runs(cluster: Cluster, pod: str, once: str, timeout: float) -> None:
    wait_for(
        lambda: pod_phase(cluster, NAMESPACE, pod) == "Running",
        what=f"{pod} bound and Running once {once}",
        timeout=timeout,
    )


def test_the_channel_device_is_published_with_its_conditions(bc_cluster: Cluster) -> None:
    slices = [s for s in items(bc_cluster, "resourceslices") if s["spec"]["driver"] == api.DRIVER_NAME]
    devices = {d["name"]: d for s in slices for d in s["spec"]["devices"]}
    # Kept by the API server: the gate is on in this minor.
    assert devices["channel-0"]["bindingConditions"] == [api.READY_CONDITION]
    assert devices["channel-0"]["bindingFailureConditions"] == [api.FAILED_CONDITION]
    assert "bindingConditions" not in devices["daemon-0"]


def test_the_pod_waits_unbound_until_the_daemon_is_ready(bc_cluster: Cluster) -> None:
    with node_fault(bc_cluster, NOT_READY_ANNOTATION, "e2e"):
        apply(bc_cluster, NAMESPACE, *workload("bc-wait"))
        # The controller labelled the node, the daemon started there and entered its clique NotReady.
        waiting = wait_for(
            lambda: (
                (c := channel_conditions(bc_cluster, "bc-wait"))
                and c[api.READY_CONDITION]["reason"] == "DaemonNotReady"
                and c
            ),
            what="ComputeDomainDaemonReady=False (DaemonNotReady) in the channel claim",
            timeout=180,
        )
        assert waiting[api.READY_CONDITION]["status"] == "False"
        assert waiting[api.FAILED_CONDITION]["status"] == "False"
        labels = get(bc_cluster, "node", NODE)["metadata"]["labels"]
        assert api.COMPUTE_DOMAIN_LABEL in labels
        time.sleep(12)  # two of the scheduler's 5 s polls: still waiting in PreBind
        assert node_name(bc_cluster, "bc-wait") == ""
        assert pod_phase(bc_cluster, NAMESPACE, "bc-wait") == "Pending"
        reasons = {e["reason"]: e for e in pod_events(bc_cluster, "bc-wait")}
        assert reasons["BindingConditionsPending"]["message"] == (
            f"waiting for binding conditions for device on node {NODE}"
        )
    runs(bc_cluster, "bc-wait", "its node's daemon is Ready (the scheduler polls every 5 s)", 120)
    assert node_name(bc_cluster, "bc-wait") == NODE
    ready = channel_conditions(bc_cluster, "bc-wait")[api.READY_CONDITION]
    assert (ready["status"], ready["reason"]) == ("True", "DaemonReady")
    delete(bc_cluster, "bc-wait")


def test_the_scheduler_gives_up_after_its_binding_timeout(bc_cluster: Cluster) -> None:
    with node_fault(bc_cluster, NOT_READY_ANNOTATION, "e2e"):
        apply(bc_cluster, NAMESPACE, *workload("bc-slow"))

        def timed_out() -> list[str] | None:
            failed = [
                e["message"] for e in pod_events(bc_cluster, "bc-slow") if e["reason"] == "FailedScheduling"
            ]
            return failed if any("device binding timeout" in m for m in failed) else None

        failed = wait_for(
            timed_out, what="bc-slow's binding given up at the timeout", timeout=BINDING_TIMEOUT + 120
        )
        prebind = 'running PreBind plugin "DynamicResources": device binding timeout'
        assert any(m.startswith(prebind) for m in failed), failed
        assert node_name(bc_cluster, "bc-slow") == ""
        ready = channel_conditions(bc_cluster, "bc-slow").get(api.READY_CONDITION) or {}
        assert ready.get("status") != "True"
    runs(bc_cluster, "bc-slow", "the daemon is Ready", 240)
    delete(bc_cluster, "bc-slow")


def test_a_failed_daemon_makes_the_scheduler_give_up_and_retry(bc_cluster: Cluster) -> None:
    with node_fault(bc_cluster, FAILED_ANNOTATION, "IMEX session in use"):
        apply(bc_cluster, NAMESPACE, *workload("bc-fail"))

        def retried() -> list[dict[str, Any]] | None:
            events = pod_events(bc_cluster, "bc-fail")
            pending = sum(times(e) for e in events if e["reason"] == "BindingConditionsPending")
            failed = [e["message"] for e in events if e["reason"] == "FailedScheduling"]
            return failed if pending >= 2 and len(failed) >= 2 else None

        # PreBind gives up at the failure condition; the next cycle's PostFilter deallocates the claim, and
        # the cycle after allocates it again and waits once more.
        failed = wait_for(
            retried, what="bc-fail's binding given up, deallocated and tried again", timeout=240
        )
        claim = pod_claim_name(bc_cluster, NAMESPACE, "bc-fail")
        assert (
            f'running PreBind plugin "DynamicResources": device binding failed: claim={claim}, '
            'reason=DaemonFailed, message="the ComputeDomain daemon on node gb200-tray-0 failed: '
            'IMEX session in use"'
        ) in failed, failed
        assert any("deallocation of ResourceClaim completed" in m for m in failed), failed
        assert node_name(bc_cluster, "bc-fail") == ""
    runs(bc_cluster, "bc-fail", "the failure is gone", 240)
    delete(bc_cluster, "bc-fail")
