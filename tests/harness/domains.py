"""ComputeDomains on a local cluster, for the e2e modules: a domain's status, and NVIDIA's channel-injection
demo (demo/specs/imex, copied unchanged to tests/data/nvidia-demo-specs) checked as NVIDIA's
tests/bats/test_cd_imex_chan_inject.bats and test_cd_misc.bats check it on real racks."""

from __future__ import annotations

from typing import Any

from fakeplugin.apis import computedomain as api
from fakeplugin.testing.containers import local_view
from tests.harness.kube import apply, get, items, pod_phase, wait_for
from tests.harness.paths import REPO

SPECS = REPO / "tests" / "data" / "nvidia-demo-specs"
# NVIDIA's two demo specs and the last channel each pod's container sees.
CHANNEL_INJECTION = [("channel-injection.yaml", "channel0"), ("channel-injection-all.yaml", "channel2047")]


def cd_status(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    return get(cluster, "computedomain", name, "-n", namespace).get("status") or {}


def ready_status(cluster: Any, namespace: str, name: str) -> dict[str, Any] | None:
    status = cd_status(cluster, namespace, name)
    return status if status.get("status") == api.STATUS_READY else None


def start_domain_job(cluster: Any, namespace: str, objects: list[dict[str, Any]]) -> None:
    """A ComputeDomain (`objects[0]`), then, once the controller made its channel template, the rest (the
    claims and pods naming that template)."""
    cd, rest = objects[0], objects[1:]
    apply(cluster, namespace, cd)
    template = cd["spec"]["channel"]["resourceClaimTemplate"]["name"]
    wait_for(
        lambda: (
            template
            in {t["metadata"]["name"] for t in items(cluster, "resourceclaimtemplates", "-n", namespace)}
        ),
        what=f"the controller's channel template {template}",
        timeout=60,
    )
    apply(cluster, namespace, *rest)


def channel_injection_ran(cluster: Any, namespace: str, cd: str, pod: str, channel: str) -> dict[str, Any]:
    """The demo's pod runs with its channel device(s) (channel1 only for allocationMode All) and its
    ComputeDomain turns Ready with one node; after the pod is deleted the node leaves the status and the
    domain is NotReady; then the domain is deleted. Returns the node's status entry while Ready."""
    wait_for(
        lambda: pod_phase(cluster, namespace, pod) == "Running",
        what=f"pod {pod} Running (its channel claim waits until the daemon is Ready)",
        timeout=240,
    )
    view = local_view(cluster, namespace, pod, "ctr")
    assert f"/dev/nvidia-caps-imex-channels/{channel}" in view.device_nodes
    assert ("/dev/nvidia-caps-imex-channels/channel1" in view.device_nodes) == (channel == "channel2047")
    status = wait_for(
        lambda: ready_status(cluster, namespace, cd), what=f"ComputeDomain {cd} Ready", timeout=60
    )
    ((entry),) = status["nodes"]
    assert entry["status"] == "Ready"

    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=true", "--timeout=120s")

    def left() -> bool:
        status = cd_status(cluster, namespace, cd)
        return "nodes" not in status and status.get("status") == api.STATUS_NOT_READY

    wait_for(left, what=f"node {entry['name']} gone from ComputeDomain {cd}'s status, NotReady", timeout=90)
    cluster.kubectl("delete", "computedomain", cd, "-n", namespace, "--wait=true", "--timeout=120s")
    return dict(entry)
