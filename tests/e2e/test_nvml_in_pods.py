"""End-to-end: NVML in a local cluster's containers. The cluster builds the mock NVML library and gives it to
each GPU plugin (`serve --nvml-library`); the real scheduler allocates, the real kubelet prepares through our
plugin (each device's NVML description written, the CDI spec mounting it and the library), the fake CRI
resolves the spec with the real CDI library; `FakepluginCluster.run_as_container` runs pynvml (nvidia-ml-py,
NVIDIA's binding) on this host as the container: its env, the mounted library and descriptions reached
through LD_LIBRARY_PATH and FAKEPLUGIN_NVML_DESCRIPTION. NVML lists exactly the container's GPUs, with the
name and UUID the ResourceSlice publishes; its readings follow the claim's load annotation, an XID injected
on the node reaches a consumer waiting on NVML's event API, and a lost GPU answers GPU_IS_LOST (the plugin's
live-state writer, telemetry.nvmllive).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from fakeplugin import nvml
from fakeplugin.drivers.gpu.prepare.nvmldata import library_container_paths
from fakeplugin.nvml.build import LIBRARY_NAME
from fakeplugin.telemetry.load import Load
from fakeplugin.telemetry.samples import temperature_c
from fakeplugin.testing import FakepluginCluster, container, device_request, pod, resource_claim
from tests.harness.seedlab import T10, published

pytestmark = pytest.mark.cluster

T10_CEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"
# What a GPU program asks NVML first: how many GPUs, and which.
PYNVML = """
import json, pynvml
pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
print(json.dumps([[pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)] for h in handles]))
"""


def nvml_gpus(cluster: FakepluginCluster, namespace: str, pod_name: str, ctr: str) -> list[list[str]]:
    """[name, UUID] of each GPU pynvml lists, run as the container."""
    done = cluster.run_as_container(namespace, pod_name, ctr, [sys.executable, "-c", PYNVML])
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    gpus: list[list[str]] = json.loads(done.stdout)
    return gpus


def nvml_mounts(cluster: FakepluginCluster, namespace: str, pod_name: str, ctr: str) -> list[str]:
    """The container paths of the NVML files the fake CRI's record mounts."""
    record: dict[str, Any] = cluster.container_record(namespace, pod_name, ctr)
    return sorted(
        m["destination"]
        for m in record["mounts"]
        if m["destination"].endswith(LIBRARY_NAME)
        or m["destination"].startswith(nvml.DESCRIPTION_CONTAINER_DIR + "/")
    )


def test_pynvml_in_a_t10_claims_container_lists_exactly_that_gpu(
    cluster: FakepluginCluster, namespace: str
) -> None:
    claim = resource_claim("t10", device_request(selector=T10_CEL))
    cluster.apply(
        [claim, pod("app", [container("main")], claims={"gpu": {"resourceClaimName": "t10"}})], namespace
    )
    assert cluster.wait_for_pod(namespace, "app", timeout=180)["spec"]["nodeName"] == T10

    (allocated,) = cluster.allocation(namespace, "t10")
    uuid = published(cluster)[T10][allocated.device]
    assert nvml_gpus(cluster, namespace, "app", "main") == [["NVIDIA T10", uuid]]
    # The record shows the CDI mounts: the library where the loader finds it, the device's description.
    assert nvml_mounts(cluster, namespace, "app", "main") == sorted(
        [
            *library_container_paths(),
            f"{nvml.DESCRIPTION_CONTAINER_DIR}/{allocated.device}.nvml",
            f"{nvml.DESCRIPTION_CONTAINER_DIR}/{allocated.device}.live",  # its live state's directory
        ]
    )


def test_a_two_request_claim_over_two_containers_each_sees_only_its_own_gpu(
    cluster: FakepluginCluster, namespace: str
) -> None:
    claim = resource_claim(
        "pair", device_request("first", selector=T10_CEL), device_request("second", selector=T10_CEL)
    )
    app = pod(
        "pair",
        [
            container("first", claims=[("gpu", "first")]),
            container("second", claims=[("gpu", "second")]),
            container("plain", claims=()),
        ],
        claims={"gpu": {"resourceClaimName": "pair"}},
    )
    cluster.apply([claim, app], namespace)
    assert cluster.wait_for_pod(namespace, "pair", timeout=180)["spec"]["nodeName"] == T10

    by_request = {a.request: a.device for a in cluster.allocation(namespace, "pair")}
    assert sorted(by_request.values()) == ["gpu-0", "gpu-1"]
    uuids = published(cluster)[T10]
    for ctr in ("first", "second"):
        assert nvml_gpus(cluster, namespace, "pair", ctr) == [["NVIDIA T10", uuids[by_request[ctr]]]], ctr
    # A container without a claim gets no NVML: nothing mounted, no description directory in its env.
    assert nvml_mounts(cluster, namespace, "pair", "plain") == []
    done = cluster.run_as_container(
        namespace,
        "pair",
        "plain",
        [sys.executable, "-c", f"import os; print(os.environ.get('{nvml.DESCRIPTION_ENV}'))"],
    )
    assert done.stdout == "None\n", done.stderr


# The GPU's readings once its utilisation is argv[1] (polled: the plugin writes the live state every 2 s).
READINGS = """
import json, sys, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
for _ in range(300):
    if pynvml.nvmlDeviceGetUtilizationRates(h).gpu == int(sys.argv[1]):
        break
    time.sleep(0.1)
memory = pynvml.nvmlDeviceGetMemoryInfo(h, pynvml.nvmlMemory_v2)
print(json.dumps({"utilization": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                  "temperature": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                  "used": memory.used, "usable": memory.total - memory.reserved}))
"""
# Registers the GPU for XID events, touches argv[1], waits up to 60 s for one event.
XID = """
import json, pathlib, sys, pynvml
pynvml.nvmlInit()
events = pynvml.nvmlEventSetCreate()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, events)
pathlib.Path(sys.argv[1]).touch()
data = pynvml.nvmlEventSetWait_v2(events, 60000)
print(json.dumps({"uuid": pynvml.nvmlDeviceGetUUID(data.device), "xid": data.eventData}))
"""
# NVML's code for the GPU's name once it is no longer the name (polled).
LOST = """
import sys, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
for _ in range(300):
    try:
        pynvml.nvmlDeviceGetName(h)
    except pynvml.NVMLError as e:
        print(e.value)
        break
    time.sleep(0.1)
"""


def test_nvml_follows_the_claims_load_and_the_nodes_faults(
    cluster: FakepluginCluster, namespace: str, tmp_path: Path
) -> None:
    cluster.apply([resource_claim("busy", device_request(selector=T10_CEL))], namespace)
    cluster.faults.set_gpu_load("claim", namespace, "busy", 80, memory=50)
    cluster.apply(
        [pod("busy", [container("main")], claims={"gpu": {"resourceClaimName": "busy"}})], namespace
    )
    assert cluster.wait_for_pod(namespace, "busy", timeout=180)["spec"]["nodeName"] == T10
    (allocated,) = cluster.allocation(namespace, "busy")

    def run(script: str, *args: str) -> str:
        done = cluster.run_as_container(namespace, "busy", "main", [sys.executable, "-c", script, *args])
        assert (done.returncode, done.stderr) == (0, ""), done.stdout
        return done.stdout

    readings = json.loads(run(READINGS, "80"))
    assert readings["utilization"] == 80
    assert readings["temperature"] == temperature_c(Load(80, 50))
    assert readings["used"] == readings["usable"] // (1024 * 1024) * 50 // 100 * 1024 * 1024

    registered = tmp_path / "registered"
    printed: list[str] = []
    waiter = threading.Thread(target=lambda: printed.append(run(XID, str(registered))))
    waiter.start()
    try:
        while not registered.exists() and waiter.is_alive():
            waiter.join(0.1)
        cluster.faults.set_device_faults(T10, f"{allocated.device}=xid:79")
        waiter.join()
        assert json.loads(printed[0]) == {"uuid": published(cluster)[T10][allocated.device], "xid": 79}
        cluster.faults.set_device_faults(T10, f"{allocated.device}=gpu-lost")
        assert run(LOST) == "15\n"  # NVML_ERROR_GPU_IS_LOST
    finally:
        cluster.faults.clear_node(T10)
