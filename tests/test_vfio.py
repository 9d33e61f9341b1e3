"""VFIO passthrough (PassthroughSupport): the devices, their CDI edits, VfioDeviceConfig, and a GPU and its
VFIO device excluding each other once either is prepared, over real files and a restart of the plugin."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import cdi, featuregates, releases
from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin.drivers.gpu import GpuDriver
from fakeplugin.drivers.gpu.prepare import cdispec, opaqueconfig
from fakeplugin.drivers.gpu.prepare.opaqueconfig import OpaqueConfigError
from fakeplugin.drivers.gpu.publish import siblings
from fakeplugin.drivers.gpu.publish.devices import IOMMU_GROUP_BASE, devices_for_node
from fakeplugin.drivers.gpu.publish.slices import device_to_api
from fakeplugin.faults import devicehealth
from fakeplugin.inventory import parse_inventory
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import DeviceSettings, GpuDevice
from fakeplugin.runtime import claims
from fakeplugin.runtime.claims import CheckedClaims
from fakeplugin.runtime.driver import NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness import DRIVER
from tests.harness.inventory import inventory
from tests.harness.prepare import BOOT, claim_object, ref, result
from tests.harness.server import RPC_TIMEOUT_S

GIB = 1024**3


def vfio_devices(*gpus: dict[str, Any]) -> dict[str, GpuDevice]:
    inv = inventory(*gpus)
    return {d.name: d for d in devices_for_node(inv, inv.nodes[0], "n", passthrough=True)}


# -- devices ----------------------------------------------------------------------------------------------


def test_each_gpu_without_mig_gets_a_vfio_device_named_by_its_place_in_pci_order() -> None:
    inv = inventory({"profile": "h200", "count": 8})
    devices = devices_for_node(inv, inv.nodes[0], "n")
    assert [d.name for d in devices] == [f"gpu-{i}" for i in range(8)]  # gate off: none

    devices = devices_for_node(inv, inv.nodes[0], "n", passthrough=True)
    names = [d.name for d in devices]
    assert len(names) == 16 and names[:2] == ["gpu-0", "gpu-vfio-0"]  # each after its GPU
    gpus = {d.pci_bus_id: d for d in devices if d.type == "gpu"}
    vfio = {d.pci_bus_id: d for d in devices if d.type == "vfio"}
    assert vfio.keys() == gpus.keys()
    # nvpci's order: by address. Buses 1b 3b 5e 86 af d8 2c 4e (minors 0-7) sort as minors 0 6 1 7 2 3 4 5.
    by_minor = {gpus[bus].minor: vfio[bus] for bus in gpus}
    assert [by_minor[m].name for m in (0, 6, 1, 7, 2, 3, 4, 5)] == [f"gpu-vfio-{n}" for n in range(8)]
    for bus, d in vfio.items():
        assert d.uuid == str(uuid.uuid5(uuid.NAMESPACE_DNS, bus))  # not the GPU's UUID
        assert d.vfio is not None and d.vfio.iommu_group == IOMMU_GROUP_BASE + d.vfio.index


def test_a_gpu_with_mig_devices_has_no_vfio_device() -> None:
    inv = inventory(
        {"profile": "h200", "mig": [{"profile": "7g.141gb", "placement": 0}]},
        {"profile": "h200"},
    )
    names = [d.name for d in devices_for_node(inv, inv.nodes[0], "n", passthrough=True)]
    assert [n for n in names if "vfio" in n] == [
        "gpu-vfio-1"
    ]  # the MIG GPU is gpu-vfio-0's slot in PCI order


@pytest.mark.parametrize(
    ("release", "iommufd", "numa"),
    [("25.12", False, True), ("0.4.1", True, True), ("0.5.0", True, False)],
)
def test_vfio_attributes_per_release(release: str, iommufd: bool, numa: bool) -> None:
    device = vfio_devices({"profile": "h200"})["gpu-vfio-0"]
    api = device_to_api(device, releases.get(release))
    expected: dict[str, Any] = {
        "type": {"string": "vfio"},
        "uuid": {"string": str(uuid.uuid5(uuid.NAMESPACE_DNS, device.pci_bus_id))},
        "deviceID": {"string": "0x2335"},
        "vendorID": {"string": "0x10de"},
        "productName": {"string": "GH100 [H200 SXM 141GB]"},
        "resource.kubernetes.io/pciBusID": {"string": device.pci_bus_id},
        "resource.kubernetes.io/pcieRoot": {"string": device.pcie_root},
    }
    if numa:  # main (0.5) replaces it by numaNode, omitted when unknown
        expected["numa"] = {"int": -1}  # sysfs -1: NUMA unknown in this inventory
    if iommufd:
        expected["iommuFDEnabled"] = {"bool": True}
    assert api == {
        "name": "gpu-vfio-0",
        "attributes": expected,
        # BAR1 256 GiB + BAR3 32 MiB, rounded up to a power of two (go-nvlib GetTotalAddressableMemory).
        "capacity": {"addressableMemory": {"value": "512Gi"}},
    }


def test_a_known_numa_node() -> None:
    doc = {"driverVersion": "580.159.04", "cudaDriverVersion": "13.0"}
    doc["nodes"] = [{"name": "n", "numaNodes": 2, "cpus": 64, "gpus": [{"profile": "h200", "count": 2}]}]
    inv = parse_inventory(doc, source="inv.yaml")
    vfio = next(
        d for d in devices_for_node(inv, inv.nodes[0], "n", passthrough=True) if d.name == "gpu-vfio-1"
    )
    assert device_to_api(vfio, releases.get("0.4.1"))["attributes"]["numa"] == {"int": 1}
    attributes = device_to_api(vfio, releases.get("0.5.0"))["attributes"]
    assert attributes[releases.NUMA_NODE_ATTRIBUTE] == {"int": 1} and "numa" not in attributes


def test_a_profile_without_a_bar1_size_or_pci_name() -> None:
    t10 = vfio_devices({"profile": "t10"})["gpu-vfio-0"]
    assert t10.vfio is not None and t10.vfio.addressable_memory_bytes == 32 * GIB  # 15 GiB → BAR1 16 GiB
    assert device_to_api(t10)["attributes"]["productName"] == {
        "string": "TU102GL [Tesla T10 16GB / GRID RTX T10-2/T10-4/T10-8]"
    }
    vr200 = vfio_devices({"profile": "vr200"})["gpu-vfio-0"]
    assert vr200.product_name == "UNKNOWN_DEVICE"  # not in go-nvlib's pci.ids: nvpci's UnknownDeviceString


def test_the_gate_exclusions_are_the_releases() -> None:
    with pytest.raises(
        ValueError, match="DynamicMIG is currently mutually exclusive with PassthroughSupport"
    ):
        featuregates.parse("DynamicMIG=true,PassthroughSupport=true", releases.get("25.12"))
    both = "PassthroughSupport=true,NVMLDeviceHealthCheck=true"
    assert featuregates.parse(both, releases.get("25.12"))["PassthroughSupport"]  # 25.12 has no such rule
    with pytest.raises(
        ValueError, match="PassthroughSupport is currently mutually exclusive with NVMLDevice"
    ):
        featuregates.parse(both, releases.get("0.4.1"))


def test_vfio_health_is_unknown_as_nvidia_reports_it() -> None:
    device = vfio_devices({"profile": "t10"})["gpu-vfio-0"]
    assert devicehealth.initial(devicehealth.kind(device)) == devicehealth.Health(
        devicehealth.UNKNOWN, "vfio devices are not covered by the NVML health monitor"
    )


def test_siblings_pair_a_gpu_and_its_vfio_device_only() -> None:
    devices = vfio_devices({"profile": "t10", "count": 2})
    assert siblings.siblings(devices, ["gpu-0"]) == {"gpu-vfio-0"}
    assert siblings.siblings(devices, ["gpu-vfio-1"]) == {"gpu-1"}
    assert siblings.removed_at_start(devices, ["gpu-0", "gpu-vfio-1"]) == {"gpu-1"}


# -- VfioDeviceConfig and the CDI record --------------------------------------------------------------------


def vfio_config(iommu: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "VfioDeviceConfig",
        **extra,
    }
    if iommu is not None:
        params["iommu"] = iommu
    return {"source": "FromClaim", "requests": ["vm"], "opaque": {"driver": DRIVER, "parameters": params}}


def settings_of(config: dict[str, Any] | None, release: str = "0.5.0") -> DeviceSettings:
    allocation = {
        "devices": {
            "results": [{"request": "vm", "driver": DRIVER, "pool": "n", "device": "gpu-vfio-0"}],
            "config": [config] if config else [],
        }
    }
    out = opaqueconfig.device_settings(
        allocation,
        vfio_devices({"profile": "h200"}),
        driver_name=DRIVER,
        pool_name="n",
        claim_uid="u",
        gates={"PassthroughSupport": True},
        release=releases.get(release),
    )
    return out["gpu-vfio-0"]


def test_vfio_device_config_defaults_and_errors() -> None:
    assert settings_of(None) == DeviceSettings("", iommu_backend_policy="LegacyOnly")  # the implicit default
    assert settings_of(vfio_config({})) == DeviceSettings("", iommu_backend_policy="LegacyOnly")
    assert settings_of(vfio_config({"backendPolicy": "PreferIommuFD", "enableAPIDevice": True})) == (
        DeviceSettings("", iommu_backend_policy="PreferIommuFD", iommu_api_device=True)
    )
    assert settings_of(None, "25.12") == DeviceSettings("")  # no `iommu` before v0.4.0
    with pytest.raises(OpaqueConfigError) as e:
        settings_of(vfio_config({"backendPolicy": "Both"}))
    assert str(e.value) == (
        "error validating GPU config: unknown IOMMU backend policy: Both, "
        "supported IOMMU backend policies: LegacyOnly, PreferIommuFD"
    )
    with pytest.raises(OpaqueConfigError) as e:
        settings_of(vfio_config({"mode": "x"}))
    assert str(e.value).endswith('strict decoding error: unknown field "iommu.mode"')
    with pytest.raises(OpaqueConfigError) as e:
        settings_of(vfio_config({}), "25.12")
    assert str(e.value).endswith('strict decoding error: unknown field "iommu"')


def spec_for(policy: str | None, api_device: bool = False) -> dict[str, Any]:
    device = vfio_devices({"profile": "h200"})["gpu-vfio-0"]
    settings = {device.name: DeviceSettings("", iommu_backend_policy=policy, iommu_api_device=api_device)}
    spec = cdispec.claim_spec(
        "0c0ffee0-0000-4000-8000-000000000001", [device], driver_name=DRIVER, settings=settings
    )
    assert cdi.validate_spec(spec) == []
    return spec


def nodes(edits: dict[str, Any]) -> list[str]:
    return [n["path"] for n in edits.get("deviceNodes", [])]


@pytest.mark.parametrize(
    ("policy", "api_device", "common", "device"),
    [
        (None, False, ["/dev/vfio/vfio"], "/dev/vfio/64"),  # 25.12: the container always
        ("LegacyOnly", False, [], "/dev/vfio/64"),
        ("LegacyOnly", True, ["/dev/vfio/vfio"], "/dev/vfio/64"),
        ("PreferIommuFD", False, [], "/dev/vfio/devices/vfio0"),
        ("PreferIommuFD", True, ["/dev/iommu"], "/dev/vfio/devices/vfio0"),
    ],
)
def test_the_cdi_record_of_a_vfio_claim(
    policy: str | None, api_device: bool, common: list[str], device: str
) -> None:
    spec = spec_for(policy, api_device)
    assert spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=void"]  # replaces our GPU edits
    assert nodes(spec["containerEdits"]) == common
    [entry] = spec["devices"]
    assert entry["name"] == "0c0ffee0-0000-4000-8000-000000000001-gpu-vfio-0"
    assert entry["containerEdits"] == {
        "deviceNodes": [
            cdispec.vfio_device_node(
                vfio_devices({"profile": "h200"})["gpu-vfio-0"],
                DeviceSettings("", iommu_backend_policy=policy, iommu_api_device=api_device),
            )
        ]
    }
    assert nodes(entry["containerEdits"]) == [device]
    assert spec["cdiVersion"] == "0.5.0"  # a name starting with a digit, deviceNodes


# -- a node: Prepare, exclusivity both ways, Unprepare, restart -----------------------------------------


class VfioNode:
    """One node of the GPU plugin (GpuDriver.node, as serve and the fleet make it) over real files."""

    def __init__(self, tmp_path: Path, release: str = "0.5.0") -> None:
        inv = tmp_path / "inv.yaml"
        doc = {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n1", "gpus": [{"profile": "h200", "count": 2}]}],
        }
        inv.write_text(yaml.safe_dump(doc))
        self.inventory = InventoryFile(inv)
        self.dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
        self.claims: dict[str, dict[str, Any]] = {}
        self.wakes = 0
        self.release = release
        self.plugin = self.start()

    def start(self) -> Any:
        """The plugin (again: a restart), told its Node object."""
        driver = GpuDriver(emulation(release=self.release, feature_gates="PassthroughSupport=true"))
        driver.slices_changed = self.woken
        plugin = driver.node(
            "n1", self.inventory, dirs=self.dirs, boot_id=BOOT, get_claim=lambda ns, n: self.claims[n]
        )
        plugin.set_node({"metadata": {"name": "n1", "uid": "uid-n1", "labels": {}, "annotations": {}}})
        return plugin  # not opened: a fleet's node opens when it first publishes or prepares

    def woken(self) -> None:
        self.wakes += 1

    def published(self) -> list[str]:
        return [d["name"] for s in self.plugin.desired_slices((1, 35)) for d in s["spec"]["devices"]]

    def prepare(self, n: int, device: str, config: dict[str, Any] | None = None) -> str:
        claim = claim_object(ref(n), result(device, "vm", pool="n1"))
        if config:
            claim["status"]["allocation"]["devices"]["config"] = [config]
        self.claims[ref(n).name] = claim
        return claims.prepare(self.plugin, [ref(n)], lambda ns, name: self.claims[name])[ref(n).uid].error

    def spec(self, n: int) -> dict[str, Any]:
        return yaml.safe_load((self.dirs.cdi_root / f"k8s.{DRIVER}-claim_{ref(n).uid}.yaml").read_text())


ALL = ["gpu-0", "gpu-vfio-0", "gpu-1", "gpu-vfio-1"]


def test_a_prepared_vfio_device_hides_its_gpu_until_unprepared(tmp_path: Path) -> None:
    node = VfioNode(tmp_path)
    assert node.published() == ALL
    config = vfio_config({"backendPolicy": "PreferIommuFD", "enableAPIDevice": True})
    assert node.prepare(1, "gpu-vfio-0", config) == ""
    assert node.published() == ["gpu-vfio-0", "gpu-1", "gpu-vfio-1"]  # republished without gpu-0
    assert node.wakes == 1
    spec = node.spec(1)
    assert nodes(spec["containerEdits"]) == ["/dev/iommu"]
    assert nodes(spec["devices"][0]["containerEdits"]) == ["/dev/vfio/devices/vfio0"]
    assert not (node.dirs.plugin_dir / "smi").exists() or not any(
        (node.dirs.plugin_dir / "smi").rglob("gpu-vfio-0*")
    )

    # The scheduler saw the old slice: a claim for gpu-0 fails at Prepare, as upstream's does.
    assert node.prepare(2, "gpu-0") == (
        f"error preparing devices for claim {ref(2)}: prepare devices failed: "
        'allocatable not found for device "gpu-0"'
    )

    assert node.plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert node.published() == ALL and node.wakes == 2
    assert not (node.dirs.cdi_root / f"k8s.{DRIVER}-claim_{ref(1).uid}.yaml").exists()
    assert node.prepare(2, "gpu-0") == ""


def test_a_prepared_gpu_hides_its_vfio_device(tmp_path: Path) -> None:
    node = VfioNode(tmp_path, release="25.12")
    assert node.prepare(1, "gpu-1") == ""
    assert node.published() == ["gpu-0", "gpu-vfio-0", "gpu-1"]
    assert node.prepare(2, "gpu-vfio-1") == (
        f"error preparing devices for claim {ref(2)}: prepare devices failed: "
        "requested device is not allocatable: gpu-vfio-1"  # 25.12's wording
    )
    assert node.plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert node.published() == ["gpu-0", "gpu-vfio-0", "gpu-1", "gpu-vfio-1"]


def test_a_restart_keeps_a_gpu_bound_to_vfio_pci_hidden_and_shows_a_prepared_gpus_vfio_device(
    tmp_path: Path,
) -> None:
    node = VfioNode(tmp_path)
    assert node.prepare(1, "gpu-vfio-0") == ""
    assert node.prepare(2, "gpu-1") == ""
    assert node.published() == ["gpu-vfio-0", "gpu-1"]
    spec = node.spec(1)

    node.plugin = node.start()  # the plugin died (kill -9) and starts again over the same files
    # gpu-0 is still bound to vfio-pci: no NVML device; gpu-vfio-1 is enumerated again (upstream does).
    assert node.published() == ["gpu-vfio-0", "gpu-1", "gpu-vfio-1"]
    assert node.prepare(1, "gpu-vfio-0") == ""  # idempotent, from the checkpoint
    assert node.spec(1) == spec
    assert node.plugin.unprepare([ref(1), ref(2)]) == {ref(1).uid: "", ref(2).uid: ""}
    assert node.published() == ALL


def test_the_kubelets_calls_over_the_real_grpc_server(tmp_path: Path, serve: Any) -> None:
    """A KubeVirt-shaped claim and a GPU claim on its sibling, NodePrepareResources over the DRA socket."""
    node = VfioNode(tmp_path)
    for n, device in ((1, "gpu-vfio-1"), (2, "gpu-1")):
        node.claims[ref(n).name] = claim_object(ref(n), result(device, "vm", pool="n1"))
    running = serve(CheckedClaims(node.plugin, lambda ns, name: node.claims[name]))
    dra = running.dra("v1")
    wire = [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in (ref(1), ref(2))]

    got = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=wire[:1]), timeout=RPC_TIMEOUT_S)
    vm = got.claims[ref(1).uid]
    assert vm.error == ""
    assert [(d.pool_name, d.device_name, list(d.request_names)) for d in vm.devices] == [
        ("n1", "gpu-vfio-1", ["vm"])
    ]
    assert list(vm.devices[0].cdi_device_ids) == [f"k8s.{DRIVER}/claim={ref(1).uid}-gpu-vfio-1"]
    assert nodes(node.spec(1)["devices"][0]["containerEdits"]) == ["/dev/vfio/65"]  # group of gpu-vfio-1

    got = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=wire[1:]), timeout=RPC_TIMEOUT_S)
    assert got.claims[ref(2).uid].error.endswith('allocatable not found for device "gpu-1"')

    done = dra.NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=wire[:1]), timeout=RPC_TIMEOUT_S
    )
    assert done.claims[ref(1).uid].error == ""
    got = dra.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=wire[1:]), timeout=RPC_TIMEOUT_S)
    assert got.claims[ref(2).uid].error == ""
