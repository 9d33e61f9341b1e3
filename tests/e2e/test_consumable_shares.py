"""End-to-end: consumable shares (driver release v0.5.0, gate ConsumableShares, flag
`--consumable-shares memory`) on the real local cluster, whose components run with DRAConsumableCapacity
(fakeplugin.cluster.versions turns it on for 1.34/1.35; on by default from 1.36).

The fixture restarts the T10 node's plugin as v0.5.0 with consumable shares and TimeSlicingSettings
(for the conflicting config below), waits for its slice to offer shared devices, and afterwards restarts it
as before and has its slice published again under 25.12's name. v0.5.0, not 0.5.0-dev: back on 25.12
the plugin reads the checkpoint the claims left, which 0.5.0-dev's (mpsControlDaemonID omitted) fails as
upstream's does (docs/driver-releases.md). examples/consumable-shares.yaml is applied
as it is documented (docs/consumable-shares.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.testing import FakepluginCluster, claim_pod, device_request, resource_claim
from tests.harness.kube import apply, apply_file, get, items, wait_for
from tests.harness.paths import EXAMPLES
from tests.harness.seedlab import T10, our_slices, timeslicing_config

pytestmark = pytest.mark.cluster

SHARED_ARGS = [
    "--driver-release=0.5.0",
    "--feature-gates=ConsumableShares=true,TimeSlicingSettings=true",
    "--consumable-shares=memory",
]


def t10_devices(cluster: FakepluginCluster) -> list[dict[str, Any]]:
    return [d for s in our_slices(cluster) if s["spec"]["nodeName"] == T10 for d in s["spec"]["devices"]]


@pytest.fixture(scope="module")
def shared_t10(cluster: FakepluginCluster) -> Iterator[list[dict[str, Any]]]:
    cluster.restart_plugin(T10, args=SHARED_ARGS)
    try:

        def shared() -> list[dict[str, Any]] | None:
            devices = t10_devices(cluster)
            return devices if devices and all(d.get("allowMultipleAllocations") for d in devices) else None

        yield wait_for(shared, what="the T10 node's slice with shared devices", timeout=120)
    finally:
        cluster.restart_plugin(T10, args=[])
        for s in our_slices(cluster):
            if s["spec"]["nodeName"] == T10:
                cluster.kubectl("delete", "resourceslice", s["metadata"]["name"], "--wait=false")

        def restored() -> bool:
            slices = [s for s in our_slices(cluster) if s["spec"]["nodeName"] == T10]
            return (
                len(slices) == 1
                and slices[0]["metadata"]["name"].startswith(f"{T10}-gpu.nvidia.com-")
                and not any(d.get("allowMultipleAllocations") for d in slices[0]["spec"]["devices"])
            )

        wait_for(restored, what="the T10 node's 25.12 slice again", timeout=120)


def memory_claim(name: str, uuid: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    cel = f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"'
    request = device_request(selector=cel, capacity={"memory": "4Gi"})
    return resource_claim(name, request, config=[config] if config else [])


def test_two_claims_share_one_gpu_and_a_conflicting_config_fails_prepare(
    cluster: FakepluginCluster, namespace: str, shared_t10: list[dict[str, Any]]
) -> None:
    gpu0 = next(d for d in shared_t10 if d["name"] == "gpu-0")
    memory = gpu0["capacity"]["memory"]
    assert memory["requestPolicy"] == {
        "default": memory["value"],
        "validRange": {"min": "1Mi", "max": memory["value"], "step": "1Mi"},
    }
    uuid = gpu0["attributes"]["uuid"]["string"]
    for name in ("a", "b"):
        apply(cluster, namespace, memory_claim(name, uuid), claim_pod(name, {"resourceClaimName": name}))
    for name in ("a", "b"):
        cluster.wait_for_pod(namespace, name, timeout=180)

    share_ids = set()
    for name in ("a", "b"):
        (result,) = get(cluster, "resourceclaim", name, "-n", namespace)["status"]["allocation"]["devices"][
            "results"
        ]
        assert (result["pool"], result["device"]) == (T10, "gpu-0")
        assert result["consumedCapacity"] == {"memory": "4Gi"}
        share_ids.add(result["shareID"])
        assert cluster.container(namespace, name, "ctr").gpus == {"gpu-0": uuid}
    assert len(share_ids) == 2

    sliced = timeslicing_config()  # time-slicing Long: not the others' (no config)
    apply(cluster, namespace, memory_claim("c", uuid, sliced), claim_pod("c", {"resourceClaimName": "c"}))

    def failures() -> list[str]:
        events = items(cluster, "events", "-n", namespace, "--field-selector", "involvedObject.name=c")
        return [e["message"] for e in events if e.get("reason") == "FailedPrepareDynamicResources"]

    messages = wait_for(failures, what="a FailedPrepareDynamicResources event for pod c", timeout=180)
    uids = {n: get(cluster, "resourceclaim", n, "-n", namespace)["metadata"]["uid"] for n in ("a", "b", "c")}
    chain = re.compile(
        re.escape(
            f"error preparing devices for claim {namespace}/c:{uids['c']}: "
            f"unable to prepare claim {uids['c']}: "
            "requested device gpu-0 has conflicting configuration with already prepared claim "
        )
        + f"({uids['a']}|{uids['b']})"
    )
    assert any(chain.search(m) for m in messages), messages
    (result,) = get(cluster, "resourceclaim", "c", "-n", namespace)["status"]["allocation"]["devices"][
        "results"
    ]
    assert (result["pool"], result["device"]) == (T10, "gpu-0")
    assert get(cluster, "pod", "c", "-n", namespace)["status"]["phase"] == "Pending"


def test_the_example_puts_three_4gi_replicas_on_two_gpus(
    cluster: FakepluginCluster, namespace: str, shared_t10: list[dict[str, Any]]
) -> None:
    apply_file(cluster, namespace, EXAMPLES / "consumable-shares.yaml")

    def running() -> list[dict[str, Any]] | None:
        pods = items(cluster, "pods", "-n", namespace, "-l", "app=memory-sharing")
        return pods if len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods) else None

    pods = wait_for(running, what="three memory-sharing replicas Running", timeout=180)
    devices = []
    for pod in pods:
        (status,) = pod["status"]["resourceClaimStatuses"]
        (result,) = get(cluster, "resourceclaim", status["resourceClaimName"], "-n", namespace)["status"][
            "allocation"
        ]["devices"]["results"]
        assert result["pool"] == T10 and result["consumedCapacity"] == {"memory": "4Gi"} and result["shareID"]
        devices.append(result["device"])
        view = cluster.container(namespace, pod["metadata"]["name"], "ctr")
        assert list(view.gpus) == [result["device"]]
    assert len(set(devices)) < len(devices) <= 3  # two GPUs, three claims: at least one GPU is shared
