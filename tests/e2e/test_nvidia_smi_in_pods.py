"""End-to-end: the fake nvidia-smi shows a container exactly the GPUs it was given.

The real scheduler allocates, the real kubelet prepares through our plugin and the fake CRI resolves the
CDI specs with the real CDI library; Cluster.run_in_container_view replays its record of a container's
mounts under a temporary root and runs the mounted /usr/bin/nvidia-smi there with /bin/sh.
"""

from __future__ import annotations

from typing import Any

import pytest

from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.testing import container, device_request, pod, resource_claim
from tests.harness.kube import apply, get, pod_phase, wait_for

pytestmark = pytest.mark.cluster

T10_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"


def nvidia_smi(cluster: Any, namespace: str, pod: str, container: str, *args: str) -> list[str]:
    result = cluster.run_in_container_view(namespace, pod, container, smi.SCRIPT_CONTAINER_PATH, *args)
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    return result.stdout.splitlines()


def allocated_uuids(cluster: Any, namespace: str, claim: str) -> list[tuple[int, str]]:
    """(minor, uuid) of each device allocated to the claim, from its node's ResourceSlice."""
    allocation = get(cluster, "resourceclaim", claim, "-n", namespace)["status"]["allocation"]
    results = allocation["devices"]["results"]
    slices = get(cluster, "resourceslices")["items"]
    uuids = {
        (s["spec"]["nodeName"], d["name"]): d["attributes"]["uuid"]["string"]
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"]["devices"]
    }
    return [(int(r["device"].removeprefix("gpu-")), uuids[(r["pool"], r["device"])]) for r in results]


def test_nvidia_smi_lists_exactly_the_containers_gpus(cluster: Any, namespace: str) -> None:
    claims = [resource_claim(name, device_request(selector=T10_CEL)) for name in ("first", "second")]
    smi_pod = pod(
        "smi",
        [container("both", claims=["first", "second"]), container("one", claims=["second"])],
        claims={n: {"resourceClaimName": n} for n in ("first", "second")},
    )
    apply(cluster, namespace, *claims, smi_pod)
    wait_for(lambda: pod_phase(cluster, namespace, "smi") == "Running", what="pod smi Running", timeout=180)

    (first,) = allocated_uuids(cluster, namespace, "first")
    (second,) = allocated_uuids(cluster, namespace, "second")
    both = cluster.container_record(namespace, "smi", "both")
    # Both claims' specs mount the script; the CDI library keeps one mount per container path.
    assert [m["destination"] for m in both["mounts"]].count(smi.SCRIPT_CONTAINER_PATH) == 1
    assert nvidia_smi(cluster, namespace, "smi", "both", "-L") == [
        f"GPU {i}: NVIDIA T10 (UUID: {uuid})" for i, (_, uuid) in enumerate(sorted([first, second]))
    ]
    table = nvidia_smi(cluster, namespace, "smi", "both")
    assert "Driver Version: 580.126.20" in table[2] and "CUDA Version: 13.0" in table[2]
    assert sum("NVIDIA T10" in line for line in table) == 2

    assert nvidia_smi(cluster, namespace, "smi", "one", "-L") == [f"GPU 0: NVIDIA T10 (UUID: {second[1]})"]
    assert nvidia_smi(
        cluster, namespace, "smi", "one", "--query-gpu=index,uuid,name", "--format=csv,noheader"
    ) == [f"0, {second[1]}, NVIDIA T10"]
