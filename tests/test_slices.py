"""ResourceSlices (publish.slices): quantities, versions, device shape, pool and splitting rules."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.drivers.gpu.publish.slices import device_to_api, resource_slices, semver
from fakeplugin.inventory import parse_inventory
from fakeplugin.quantity import format_binary_si
from fakeplugin.resourceslices import split_devices

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (23028 * MIB, "23028Mi"),
        (15360 * MIB, "15Gi"),
        (40960 * MIB, "40Gi"),
        (81920 * MIB, "80Gi"),
        (81559 * MIB, "81559Mi"),
        (143771 * MIB, "143771Mi"),
        (150754820096, "143771Mi"),
        (1536, "1536"),
        (1024, "1Ki"),
        (1 << 60, "1Ei"),
        (1 << 70, "1024Ei"),
        (0, "0"),
        (1023, "1023"),
        (1000, "1k"),  # below 1024 Kubernetes formats BinarySI as DecimalSI
        (500, "500"),
        (-2048, "-2Ki"),
    ],
)
def test_format_quantity_is_canonical_binary_si(n: int, text: str) -> None:
    assert format_binary_si(n) == text


@pytest.mark.parametrize(
    ("version", "expected"),
    [("580.95.05", "580.95.5"), ("580.159.04", "580.159.4"), ("580.126.20", "580.126.20"), ("13.0", "13.0.0"),
     ("8.6", "8.6.0"), ("580.95", "580.95.0")],
)  # fmt: skip
def test_semver_drops_leading_zeros_and_pads(version: str, expected: str) -> None:
    assert semver(version) == expected


def h200_capture_device() -> dict[str, Any]:
    inv = parse_inventory(
        {
            "driverVersion": "580.159.04",
            "cudaDriverVersion": "13.0",
            "nodes": [
                {
                    "name": "h200-host",
                    "gpus": [
                        {
                            "profile": "h200",
                            "uuid": "GPU-bd363601-0402-2785-a79b-f013317dbdce",
                            "pciBusID": "00000000:00:06.0",
                        }
                    ],
                }
            ],
        }
    )
    return device_to_api(devices_for_node(inv, inv.nodes[0], "h200-host")[0])


def test_device_matches_the_real_h200_slice_entry() -> None:
    # The device the real driver publishes for the captured host (tests/data/nvidia-smi-h200).
    expected = yaml.safe_load(
        """
        name: gpu-0
        attributes:
          type: {string: gpu}
          uuid: {string: GPU-bd363601-0402-2785-a79b-f013317dbdce}
          productName: {string: NVIDIA H200}
          brand: {string: Nvidia}
          architecture: {string: Hopper}
          cudaComputeCapability: {version: 9.0.0}
          driverVersion: {version: 580.159.4}
          cudaDriverVersion: {version: 13.0.0}
          resource.kubernetes.io/pciBusID: {string: "0000:00:06.0"}
          resource.kubernetes.io/pcieRoot: {string: pci0000:00}
          addressingMode: {string: None}
        capacity:
          memory: {value: 143771Mi}
        """
    )
    assert h200_capture_device() == expected


def test_profiles_without_addressing_mode_omit_the_attribute() -> None:
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": [{"profile": "rtx-a5000", "ecc": True}]}],
        }
    )
    device = device_to_api(devices_for_node(inv, inv.nodes[0], "n")[0])
    assert list(device["attributes"]) == [
        "type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion",
        "cudaDriverVersion", "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot",
    ]  # fmt: skip
    assert device["attributes"]["brand"] == {"string": "NvidiaRTX"}
    assert device["attributes"]["driverVersion"] == {"version": "580.126.20"}
    assert device["capacity"] == {"memory": {"value": "23028Mi"}}


def plain(i: int) -> dict[str, Any]:
    return {"name": f"gpu-{i}"}


def tainted(i: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "taints": [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}],
    }


def counting(i: int) -> dict[str, Any]:
    return {"name": f"gpu-{i}", "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {}}]}


def sizes(devices: list[dict[str, Any]]) -> list[int]:
    return [len(chunk) for chunk in split_devices(devices)]


def test_split_at_128_plain_devices() -> None:
    assert sizes([plain(i) for i in range(128)]) == [128]
    assert sizes([plain(i) for i in range(129)]) == [128, 1]
    assert sizes([plain(i) for i in range(300)]) == [128, 128, 44]
    assert sizes([]) == []


def test_split_at_64_once_a_device_has_taints_or_counters() -> None:
    assert sizes([tainted(i) for i in range(65)]) == [64, 1]
    assert sizes([counting(i) for i in range(64)]) == [64]
    # 10 plain + 1 with counters: that slice is now limited to 64.
    assert sizes([plain(i) for i in range(10)] + [counting(10)] + [plain(i) for i in range(11, 80)]) == [
        64,
        16,
    ]
    # 100 plain fit one slice; a tainted device cannot join it (it would hold 101 > 64).
    assert sizes([plain(i) for i in range(100)] + [tainted(100)]) == [100, 1]
    # order is kept across chunks
    chunks = split_devices([plain(i) for i in range(200)])
    assert [d["name"] for chunk in chunks for d in chunk] == [f"gpu-{i}" for i in range(200)]


def test_resource_slice_object() -> None:
    (rs,) = resource_slices(
        [h200_capture_device()], driver="gpu.nvidia.com", node_name="node1", node_uid="uid-1"
    )
    assert rs["apiVersion"] == "resource.k8s.io/v1" and rs["kind"] == "ResourceSlice"
    assert rs["metadata"] == {
        "generateName": "00000-gpu.nvidia.com-node1-",  # the default release's (0.5.0) name
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "node1", "uid": "uid-1", "controller": True}
        ],
    }
    assert rs["spec"] == {
        "driver": "gpu.nvidia.com",
        "nodeName": "node1",
        "pool": {"name": "node1", "generation": 1, "resourceSliceCount": 1},
        "devices": [h200_capture_device()],
    }


def test_split_pool_counts_its_slices_and_keeps_generation() -> None:
    devices = [tainted(i) for i in range(130)]
    slices = resource_slices(devices, driver="d.example.com", node_name="n", node_uid="u", generation=4)
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 64, 2]
    assert [s["spec"]["pool"] for s in slices] == [
        {"name": "n", "generation": 4, "resourceSliceCount": 3}
    ] * 3


def test_gpu_devices_are_accepted_directly() -> None:
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": [{"profile": "t4", "count": 2}]}],
        }
    )
    devices = devices_for_node(inv, inv.nodes[0], "n")
    (rs,) = resource_slices(devices, driver="gpu.nvidia.com", node_name="n", node_uid="u")
    assert rs["spec"]["devices"] == [device_to_api(d) for d in devices]


def test_no_devices_no_slices() -> None:
    assert resource_slices([], driver="gpu.nvidia.com", node_name="n", node_uid="u") == []
