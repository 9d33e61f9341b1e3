"""`nvidia.com/gpu` through DRA (KEP-5004, gate DRAExtendedResource): a pod that asks for
`resources.limits: nvidia.com/gpu: 1` and names no claim is served from our slices, through the
DeviceClass's `extendedResourceName`, and its container gets our CDI device."""

from __future__ import annotations

from typing import Any

import pytest

from fakeplugin.testing import container, pod
from fakeplugin.testing.objects import container_gpus
from tests.harness.kube import apply, get, items, pod_phase, wait_for

pytestmark = pytest.mark.cluster


def test_extended_resource_pod_gets_a_gpu_from_our_slices(cluster: Any, namespace: str):
    gpu_class = get(cluster, "deviceclass", "gpu.nvidia.com")
    assert gpu_class["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    legacy = pod(
        "legacy",
        [container(claims=[], resources={"limits": {"nvidia.com/gpu": "1"}})],
        restart_policy=None,
    )
    apply(cluster, namespace, legacy)
    wait_for(lambda: pod_phase(cluster, namespace, "legacy") == "Running", what="pod Running", timeout=180)

    status = get(cluster, "pod", "legacy", "-n", namespace)["status"]
    claim_name = status["extendedResourceClaimStatus"]["resourceClaimName"]
    (claim,) = [
        c for c in items(cluster, "resourceclaims", "-n", namespace) if c["metadata"]["name"] == claim_name
    ]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == "gpu.nvidia.com"
    node = get(cluster, "pod", "legacy", "-n", namespace)["spec"]["nodeName"]
    assert result["pool"] == node

    record = cluster.container_record(namespace, "legacy", "ctr")
    uid = claim["metadata"]["uid"]
    assert record["cdiDevices"] == [f"k8s.gpu.nvidia.com/claim={uid}-{result['device']}"]
    env = dict(e.split("=", 1) for e in record["env"])
    slices = [s for s in items(cluster, "resourceslices") if s["spec"]["nodeName"] == node]
    uuid = next(
        d["attributes"]["uuid"]["string"]
        for s in slices
        for d in s["spec"]["devices"]
        if d["name"] == result["device"]
    )
    assert container_gpus(env) == {result["device"]: uuid}
