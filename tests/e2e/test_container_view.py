"""End-to-end: a claim whose requests go to different containers, in the shapes of NVIDIA's own quickstart
(demo/specs/quickstart/v1 of the real driver): each container sees exactly the devices of the requests it
references, in its env, its files and `nvidia-smi`, because the real kubelet hands each container only those
CDI devices and every edit that names a GPU sits on that GPU's CDI device.

- gpu-test4: four MIG devices of one GPU (1g.5gb twice, 2g.10gb, 3g.20gb, one parent by a matchAttribute
  constraint), one request each, one container per request. The session cluster has no MIG GPU: an
  A100-40GB in the quickstart's half-balanced layout joins the A5000 node's inventory for the test.
- gpu-test5: a time-sliced GPU for two containers and an MPS GPU for two others, in one claim (the T10
  node's two GPUs; the plugins run with TimeSlicingSettings and MPSSupport for this module).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.testing import (
    FakepluginCluster,
    container,
    device_request,
    opaque_config,
    pod,
    resource_claim_template,
)
from tests.harness.kube import items, wait_for
from tests.harness.seedlab import A5000, T10, WITHIN, published, write_inventory

pytestmark = pytest.mark.cluster

GPU_NODES = "nvidia.com/dra-kubelet-plugin=true"
A100_HALF_BALANCED = {
    "profile": "a100-40gb",
    "mig": [{"profile": "1g.5gb", "count": 2}, {"profile": "2g.10gb"}, {"profile": "3g.20gb"}],
}
MIG_REQUESTS = {  # request → profile, as in gpu-test4
    "mig-1g-5gb-0": "1g.5gb",
    "mig-1g-5gb-1": "1g.5gb",
    "mig-2g-10gb": "2g.10gb",
    "mig-3g-20gb": "3g.20gb",
}


@pytest.fixture(scope="module")
def sharing_plugins(cluster: FakepluginCluster) -> Iterator[None]:
    nodes = [n["metadata"]["name"] for n in items(cluster, "nodes", "-l", GPU_NODES)]
    for node in nodes:
        cluster.restart_plugin(node, args=["--feature-gates=TimeSlicingSettings=true,MPSSupport=true"])
    yield
    for node in nodes:
        cluster.restart_plugin(node, args=[])


@pytest.fixture
def a100_on_the_a5000_node(cluster: FakepluginCluster) -> Iterator[None]:
    """The session inventory with a half-balanced A100-40GB added to the A5000 node; restored afterwards."""
    path, original, before = cluster.inventory, cluster.inventory.read_bytes(), published(cluster)
    inventory = yaml.safe_load(original)
    (entry,) = [n for n in inventory["nodes"] if n.get("name") == A5000]
    entry["gpus"].append(A100_HALF_BALANCED)
    write_inventory(path, inventory)
    try:
        wait_for(lambda: len(published(cluster)[A5000]) == 5, what="the A100's MIG devices", timeout=WITHIN)
        yield
    finally:
        write_atomic(path, original, mode=0o644)
        wait_for(lambda: published(cluster) == before, what="the original slices again", timeout=WITHIN)


def quickstart_pod(name: str, claim_template: str, containers: dict[str, str]) -> dict[str, Any]:
    """A pod with one claim entry `gpus` from `claim_template`; container name → the request it uses."""
    command = ["bash", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 9999 & wait"]
    return pod(
        name,
        [container(ctr, claims=[("gpus", req)], command=command) for ctr, req in containers.items()],
        claims={"gpus": {"resourceClaimTemplateName": claim_template}},
        restart_policy=None,
    )


def published_attributes(cluster: FakepluginCluster, node: str) -> dict[str, dict[str, str]]:
    """Device name → attributes (plain values) of the node's published devices."""
    return {
        d["name"]: {k: next(iter(v.values())) for k, v in d["attributes"].items()}
        for s in cluster.get("resourceslices")["items"]
        if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"]["nodeName"] == node
        for d in s["spec"]["devices"]
    }


def claim_of(cluster: FakepluginCluster, namespace: str, pod_name: str) -> dict[str, Any]:
    (status,) = cluster.get("pod", pod_name, namespace)["status"]["resourceClaimStatuses"]
    return cluster.get("resourceclaim", status["resourceClaimName"], namespace)


def test_gpu_test4_each_container_sees_only_its_own_mig_device(
    cluster: FakepluginCluster, namespace: str, a100_on_the_a5000_node: None
) -> None:
    profile_cel = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    claim_template = resource_claim_template(
        "mig-devices",
        *(
            device_request(r, "mig.nvidia.com", selector=profile_cel.format(p))
            for r, p in MIG_REQUESTS.items()
        ),
        constraints=[{"requests": [], "matchAttribute": "gpu.nvidia.com/parentUUID"}],
    )
    containers = {f"ctr{i}": r for i, r in enumerate(MIG_REQUESTS)}
    cluster.apply([claim_template, quickstart_pod("pod", "mig-devices", containers)], namespace)
    assert cluster.wait_for_pod(namespace, "pod", timeout=180)["spec"]["nodeName"] == A5000

    claim = claim_of(cluster, namespace, "pod")
    by_request = {a.request: a.device for a in cluster.allocation(namespace, claim["metadata"]["name"])}
    assert sorted(by_request) == sorted(MIG_REQUESTS)
    devices = published_attributes(cluster, A5000)
    (parent,) = {devices[d]["parentUUID"] for d in by_request.values()}
    uid = claim["metadata"]["uid"]

    for ctr, req in containers.items():
        device = by_request[req]
        view = cluster.container(namespace, "pod", ctr)
        assert view.cdi_devices == [f"k8s.gpu.nvidia.com/claim={uid}-{device}"], ctr
        assert view.gpus == {device: devices[device]["uuid"]}, ctr
        assert view.env["NVIDIA_VISIBLE_DEVICES"] == "void"
        data = sorted(
            m["destination"] for m in view.mounts if m["destination"].startswith("/run/fakeplugin/")
        )
        # its nvidia-smi data, NVML description and live values (the cluster's plugins have the mock NVML
        # library)
        assert data == [
            f"/run/fakeplugin/gpus/{device}.env",
            f"/run/fakeplugin/nvml/{device}.live",
            f"/run/fakeplugin/nvml/{device}.nvml",
        ], ctr
        smi = view.run("nvidia-smi -L")
        assert smi.returncode == 0, smi.stderr
        gpu_line, mig_line = smi.stdout.splitlines()  # its GPU, and under it only its own MIG device
        assert gpu_line == f"GPU 0: NVIDIA A100-SXM4-40GB (UUID: {parent})", ctr
        assert mig_line.startswith(f"  MIG {MIG_REQUESTS[req]} "), ctr
        assert mig_line.endswith(f"Device  0: (UUID: {devices[device]['uuid']})"), ctr


def test_gpu_test5_time_sliced_and_mps_containers_each_see_their_own_gpu_and_sharing(
    cluster: FakepluginCluster, namespace: str, sharing_plugins: None
) -> None:
    def sharing(req: str, parameters: dict[str, Any]) -> dict[str, Any]:
        gpu_config = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", **parameters}
        return opaque_config(gpu_config, requests=[req])

    claim_template = resource_claim_template(
        "multiple-gpus",
        device_request("ts-gpu"),
        device_request("mps-gpu"),
        config=[
            sharing(
                "ts-gpu",
                {"sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}},
            ),
            sharing(
                "mps-gpu",
                {
                    "sharing": {
                        "strategy": "MPS",
                        "mpsConfig": {
                            "defaultActiveThreadPercentage": 50,
                            "defaultPinnedDeviceMemoryLimit": "10Gi",
                        },
                    }
                },
            ),
        ],
    )
    containers = {"ts-ctr0": "ts-gpu", "ts-ctr1": "ts-gpu", "mps-ctr0": "mps-gpu", "mps-ctr1": "mps-gpu"}
    cluster.apply([claim_template, quickstart_pod("pod0", "multiple-gpus", containers)], namespace)
    assert cluster.wait_for_pod(namespace, "pod0", timeout=180)["spec"]["nodeName"] == T10

    claim = claim_of(cluster, namespace, "pod0")
    by_request = {a.request: a.device for a in cluster.allocation(namespace, claim["metadata"]["name"])}
    assert sorted(by_request.values()) == ["gpu-0", "gpu-1"]
    uuids = {name: attrs["uuid"] for name, attrs in published_attributes(cluster, T10).items()}
    expected_env = {
        "ts-gpu": {"SHARING_STRATEGY": "TimeSlicing", "TIMESLICE_INTERVAL": "Long"},
        "mps-gpu": {"SHARING_STRATEGY": "MPS", "MPS_ACTIVE_THREAD_PERCENTAGE": "50"},
    }
    compute_mode = {"ts-gpu": "Default", "mps-gpu": "Exclusive_Process"}

    for ctr, req in containers.items():
        device = by_request[req]
        other = next(d for d in by_request.values() if d != device)
        minor = device.removeprefix("gpu-")
        view = cluster.container(namespace, "pod0", ctr)
        assert view.gpus == {device: uuids[device]}, ctr
        assert view.env["NVIDIA_VISIBLE_DEVICES"] == "void"
        for key, value in expected_env[req].items():
            assert view.env[f"FAKEPLUGIN_GPU_{minor}_{key}"] == value, (ctr, key)
        assert not [k for k in view.env if k.startswith(f"FAKEPLUGIN_GPU_{other.removeprefix('gpu-')}_")], ctr
        assert ("CUDA_MPS_PIPE_DIRECTORY" in view.env) == (req == "mps-gpu"), ctr
        assert ("FAKEPLUGIN_GPU_" + minor + "_TIMESLICE_INTERVAL" in view.env) == (req == "ts-gpu"), ctr
        smi = view.run("nvidia-smi -L")
        assert smi.stdout.splitlines() == [f"GPU 0: NVIDIA T10 (UUID: {uuids[device]})"], smi.stderr
        query = view.run("nvidia-smi --query-gpu=uuid,compute_mode --format=csv,noheader")
        assert query.stdout == f"{uuids[device]}, {compute_mode[req]}\n", query.stderr
