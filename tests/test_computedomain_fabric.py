"""The compute-domain plugin's start: its read of the node's NVLink fabric under the fabric-state fault
(NVIDIA's getCliqueID, strict and legacy), and --gpu-clique-label-enabled (its nvidia.com/gpu.clique
label)."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.apis.computedomain import GPU_CLIQUE_LABEL
from fakeplugin.drivers.computedomain import fabric
from fakeplugin.drivers.computedomain.cliquelabel import LabelError
from fakeplugin.drivers.computedomain.plugin import ComputeDomainDriver
from fakeplugin.drivers.gpu.publish.devices import devices_for_node, gpu_uuid
from fakeplugin.faults import fabricfaults
from fakeplugin.faults.fabricfaults import ANNOTATION
from fakeplugin.inventory import parse_inventory
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ZERO_UUID, Fabric
from fakeplugin.runtime.driver import NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness.computedomain import (
    BOOT,
    CD_DRIVER,
    CD_UID,
    CLIQUE_ID,
    CLUSTER,
    NAMESPACE,
    NODE,
    Api,
    add_claim,
    inventory,
)
from tests.harness.hosted import Hosted

GPU1 = gpu_uuid(NODE, 1)
NOT_ATTACHED = (
    "error getting fabric information from one or more devices: "
    f"NVLink fabric not attached (device 1/{GPU1}): state=2, refusing to start"
)


def plugin_for(
    tmp_path: Path, api: Api, *, release: str = "", gates: str = "", label: bool = False, node: str = NODE
) -> Any:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory(clique=2, clusterUUID=CLUSTER)))
    driver = ComputeDomainDriver(
        emulation(release=release, driver_name=CD_DRIVER, feature_gates=gates),
        api,
        namespace=NAMESPACE,
        gpu_clique_label=label,
    )
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugins" / CD_DRIVER)
    plugin = driver.node(node, InventoryFile(inv), dirs=dirs, boot_id=BOOT, get_claim=api.get_claim)
    return Hosted(plugin, api.get_claim)


def faulted(value: str) -> Api:
    api = Api()
    api.node["metadata"]["annotations"] = {ANNOTATION: value}
    return api


# -- the read itself (pure) ---------------------------------------------------------------------------------


def gpus(*fabrics: Fabric | None) -> list[fabric.Gpu]:
    return [fabric.Gpu(i, f"GPU-{i}", f) for i, f in enumerate(fabrics)]


OK = Fabric(2, CLUSTER)


def test_strict_refuses_the_first_gpu_not_completed_or_in_error(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fakeplugin.drivers.computedomain.fabric")
    assert fabric.clique_id(gpus(OK, OK), strict=True) == CLIQUE_ID
    assert "identified fabric clique UUID/ID (device 1/GPU-1): " + CLIQUE_ID in caplog.messages
    with pytest.raises(fabric.FabricError) as e:
        fabric.clique_id(
            gpus(OK, Fabric(2, CLUSTER, "Not Started", "N/A"), Fabric(2, CLUSTER, "In Progress")), strict=True
        )
    assert str(e.value) == (
        "error getting fabric information from one or more devices: "
        "NVLink fabric not attached (device 1/GPU-1): state=1, refusing to start"
    )
    with pytest.raises(fabric.FabricError) as e:
        fabric.clique_id(gpus(Fabric(2, CLUSTER, "Completed", "Timeout")), strict=True)
    assert str(e.value).endswith(
        "NVLink fabric registration error (device 0/GPU-0): status=Timeout, refusing to start"
    )
    # A zero ClusterUUID (an HGX GPU's) is no fabric, not an error; nor is a GPU with no fabric info (None).
    caplog.clear()
    assert fabric.clique_id(gpus(Fabric(0, ZERO_UUID), None), strict=True) == ""
    assert caplog.messages == [
        f"no-clique fallback: cluster UUID is zero, treat as fabric not attached (device {i}/GPU-{i})"
        for i in range(2)
    ]


def test_legacy_falls_back_per_gpu(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "fakeplugin.drivers.computedomain.fabric")
    stuck = Fabric(2, CLUSTER, "In Progress", "N/A")
    assert fabric.clique_id(gpus(OK, stuck), strict=False) == CLIQUE_ID  # the attached GPU gives it
    assert "no-clique fallback: fabric not attached (device 1/GPU-1)" in caplog.messages
    assert fabric.clique_id(gpus(stuck, Fabric(2, CLUSTER, "Completed", "Unknown Error")), strict=False) == ""


def hgx_h200(*, with_n_a: bool = False) -> list[Any]:
    gpus = [{"profile": "h200", "count": 2}] + ([{"profile": "t4"}] if with_n_a else [])
    inv = parse_inventory(
        {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [{"name": "hgx", "gpus": gpus}]}
    )
    return devices_for_node(inv, inv.nodes[0], "hgx")


def test_a_gpu_outside_a_domain_is_read_as_its_model_registers_under_the_fault() -> None:
    """An HGX H200 registers outside a multi-node domain (profile smi.fabric: CliqueId 0, the zero
    ClusterUUID): no clique, and the fault's state comes first as in upstream's getCliqueIDStrict; a model
    whose fabric info is N/A (T4) is not changed by it."""
    devices = hgx_h200(with_n_a=True)
    assert [g.fabric for g in fabric.node_gpus(devices, {})] == [Fabric(0, ZERO_UUID)] * 2 + [None]
    assert fabric.clique_id(fabric.node_gpus(devices, {}), strict=True) == ""
    faults = fabricfaults.parse_fabric_faults("InProgress")
    read = fabric.node_gpus(devices, faults)
    assert [g.fabric for g in read] == [Fabric(0, ZERO_UUID, "In Progress", "N/A")] * 2 + [None]
    with pytest.raises(fabric.FabricError, match=r"NVLink fabric not attached \(device 0/.*\): state=2"):
        fabric.clique_id(read, strict=True)
    assert fabric.clique_id(read, strict=False) == ""
    assert fabricfaults.unknown_devices(fabricfaults.parse_fabric_faults("gpu-2=NotStarted"), devices) == [
        "gpu-2"
    ]


# -- the plugin's start -------------------------------------------------------------------------------------


def test_the_plugin_refuses_to_start_with_upstreams_error(tmp_path: Path) -> None:
    # 25.12's chain (0.4.1's too); 0.5.0 wraps it (next test). Never told the node: read by GET at start.
    plugin = plugin_for(tmp_path, faulted("gpu-1=InProgress"), release="25.12")
    with pytest.raises(fabric.FabricError) as e:
        plugin.open()
    assert str(e.value) == f"error creating driver: error getting cliqueID: {NOT_ATTACHED}"
    # A host that cannot crash one node (the fleet): every call meets the same refusal.
    ref = add_claim(plugin._driver.api, "c1", "channel-0")
    assert plugin.prepare([ref])["c1"].error == str(e.value)
    assert plugin.unprepare([ref]) == {"c1": str(e.value)}
    assert plugin.prepared_claims() == []


def test_main_wraps_the_error_in_the_manager(tmp_path: Path) -> None:
    plugin = plugin_for(tmp_path, faulted("Completed:ERROR_TIMEOUT"), release="0.5.0-dev")
    with pytest.raises(fabric.FabricError) as e:
        plugin.open()
    assert str(e.value) == (
        "error creating driver: unable to create computedomain manager: error getting cliqueID: "
        "error getting fabric information from one or more devices: NVLink fabric registration error "
        f"(device 0/{gpu_uuid(NODE, 0)}): status=Timeout, refusing to start"
    )


def test_without_the_gate_the_node_has_no_clique_until_a_restart(tmp_path: Path) -> None:
    api = faulted("NotStarted")
    plugin = plugin_for(tmp_path, api, gates="CrashOnNVLinkFabricErrors=false")
    plugin.set_node(copy.deepcopy(api.node))
    plugin.open()
    assert plugin.clique_id() == ""
    daemon = add_claim(api, "d1", "daemon-0")
    assert plugin.prepare([daemon])["d1"].error == ""
    spec = yaml.safe_load((tmp_path / "cdi" / "k8s.compute-domain.nvidia.com-claim_d1.yaml").read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert "CLIQUE_ID=" in edits["env"] and "deviceNodes" not in edits  # the daemon idles, no caps device
    api.domains[CD_UID]["status"] = {"nodes": [{"name": NODE, "cliqueID": "", "status": "Ready"}]}
    channel = add_claim(api, "c1", "channel-0")
    result = plugin.prepare([channel])["c1"]
    assert (result.error, [d.cdi_device_ids for d in result.devices]) == ("", [()])  # no channel device
    assert not (tmp_path / "cdi" / "k8s.compute-domain.nvidia.com-claim_c1.yaml").exists()
    # Read once, at start: the fault's removal changes nothing until the plugin restarts.
    del api.node["metadata"]["annotations"]
    plugin.set_node(copy.deepcopy(api.node))
    assert plugin.clique_id() == ""
    restarted = plugin_for(tmp_path, api, gates="CrashOnNVLinkFabricErrors=false")
    restarted.open()
    assert restarted.clique_id() == CLIQUE_ID


def test_one_attached_gpu_keeps_the_clique_without_the_gate(tmp_path: Path) -> None:
    plugin = plugin_for(
        tmp_path,
        faulted("gpu-0=InProgress,gpu-1=InProgress,gpu-2=InProgress"),
        gates="CrashOnNVLinkFabricErrors=false",
    )
    plugin.open()
    assert plugin.clique_id() == CLIQUE_ID


def test_a_fault_set_after_the_start_changes_nothing(tmp_path: Path) -> None:
    api = Api()
    plugin = plugin_for(tmp_path, api)
    plugin.set_node(copy.deepcopy(api.node))
    plugin.open()
    api.node["metadata"]["annotations"] = {ANNOTATION: "InProgress"}
    plugin.set_node(copy.deepcopy(api.node))
    assert plugin.clique_id() == CLIQUE_ID


def test_a_bad_annotation_is_logged_and_the_plugin_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = plugin_for(tmp_path, faulted("gpu-0=Stuck"))
    plugin.open()
    assert plugin.clique_id() == CLIQUE_ID
    assert any(f"annotation {ANNOTATION}: 'gpu-0=Stuck'" in m for m in caplog.messages)


# -- --gpu-clique-label-enabled -----------------------------------------------------------------------------


def test_the_clique_label_is_set_at_start_and_removed_at_stop(tmp_path: Path) -> None:
    api = Api()
    plugin = plugin_for(tmp_path, api, label=True)
    plugin.set_node(copy.deepcopy(api.node))
    assert GPU_CLIQUE_LABEL not in api.node["metadata"]["labels"]  # not before the start
    plugin.open()
    assert api.node["metadata"]["labels"][GPU_CLIQUE_LABEL] == CLIQUE_ID
    plugin.close()
    assert GPU_CLIQUE_LABEL not in api.node["metadata"]["labels"]


def test_the_clique_label_follows_a_new_clique_id(tmp_path: Path) -> None:
    api = Api()
    plugin = plugin_for(tmp_path, api, label=True)
    plugin.open()
    inv = tmp_path / "inv.yaml"
    other = f"{CLUSTER}.5"
    inv.write_text(yaml.safe_dump(inventory(clique=5, clusterUUID=CLUSTER)))
    plugin._inventory.reload_if_changed()
    assert plugin.refresh() is True
    assert api.node["metadata"]["labels"][GPU_CLIQUE_LABEL] == other


def test_no_clique_no_label_and_off_by_default(tmp_path: Path) -> None:
    api = Api()
    api.node["metadata"]["name"] = "hgx-h200"
    plugin_for(tmp_path, api, label=True, node="hgx-h200").open()
    assert GPU_CLIQUE_LABEL not in api.node["metadata"]["labels"]
    detached = faulted("InProgress")
    plugin_for(tmp_path, detached, label=True, gates="CrashOnNVLinkFabricErrors=false").open()
    assert GPU_CLIQUE_LABEL not in detached.node["metadata"]["labels"]  # not attached at start: no clique
    quiet = Api()
    plugin_for(tmp_path, quiet).open()
    assert GPU_CLIQUE_LABEL not in quiet.node["metadata"]["labels"]


def test_a_label_that_cannot_be_set_stops_the_start(tmp_path: Path) -> None:
    class Refusing(Api):
        def patch_node_labels(self, name: str, labels: Any, *, resource_version: str) -> dict[str, Any]:
            raise RuntimeError("forbidden")

    with pytest.raises(LabelError) as e:
        plugin_for(tmp_path, Refusing(), label=True).open()
    assert str(e.value) == (
        f"error setting {GPU_CLIQUE_LABEL} node label: error patching node with label {GPU_CLIQUE_LABEL}: "
        "forbidden"
    )
