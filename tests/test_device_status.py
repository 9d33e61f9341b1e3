"""`--device-status` (ours, beyond NVIDIA's releases): a prepared claim's GPU and MIG devices in its
status.devices (prepare.devicestatus over runtime.claimstatus), written by the GPU plugin of serve and the
fleet (drivers.gpu), removed at Unprepare."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from fakeplugin import mig
from fakeplugin.drivers.gpu import GpuDriver
from fakeplugin.drivers.gpu.prepare import devicestatus
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.runtime import claims
from fakeplugin.runtime.driver import NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness import DRIVER
from tests.harness.prepare import BOOT, NODE, claim_object, gpu, ref, result

NOW = "2026-12-04T16:00:00Z"
LATER = "2026-12-04T16:05:00Z"
FOREIGN = {"driver": "net.example.com", "pool": NODE, "device": "nic-0", "data": {"mac": "00:11"}}
CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/claim-1/status"


def inventory_file(tmp_path: Path, gpus: list[dict[str, Any]]) -> InventoryFile:
    doc = {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [{"name": NODE, "gpus": gpus}],
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(doc))
    return InventoryFile(path)


NODE_OBJ = {"metadata": {"name": NODE, "uid": "node-uid", "labels": {}, "annotations": {}}}


def pool() -> dict[str, Any]:
    return {d.name: d for d in map(gpu, range(2))}


def allocated(*results: dict[str, Any], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    claim = claim_object(ref(1), *results)
    claim["metadata"]["resourceVersion"] = "7"
    if devices is not None:
        claim["status"]["devices"] = devices
    return claim


def test_our_prepared_devices_get_an_entry_and_others_stay() -> None:
    claim = allocated(
        result("gpu-0"),
        result("gpu-1", "shared") | {"shareID": "5e0c0b1e-0000-4000-8000-000000000001"},
        result("gpu-0", driver="other.example.com"),
        result("gpu-1", pool="another-node"),
        devices=[FOREIGN],
    )
    new = devicestatus.prepared_devices(claim, {"gpu-0", "gpu-1"}, pool(), driver=DRIVER, node=NODE, now=NOW)
    assert new is not None
    foreign, first, shared = new
    assert foreign == FOREIGN
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "DevicePrepared",
        "message": f"prepared on node {NODE}",
        "lastTransitionTime": NOW,
    }
    assert first == {
        "driver": DRIVER,
        "pool": NODE,
        "device": "gpu-0",
        "conditions": [ready],
        "data": {
            "type": "gpu",
            "uuid": "GPU-00000000-1111-2222-3333-444444444444",
            "productName": gpu(0).product_name,
            "pciBusID": "0000:03:00.0",
        },
    }
    # A shared device's entry carries its allocation's shareID (the API server keys entries with it).
    assert shared["shareID"] == "5e0c0b1e-0000-4000-8000-000000000001" and shared["device"] == "gpu-1"
    # Prepared again (a second pod, a kubelet restart): nothing to write, the transition time stays.
    again = allocated(*claim["status"]["allocation"]["devices"]["results"], devices=new)
    names = {"gpu-0", "gpu-1"}
    assert devicestatus.prepared_devices(again, names, pool(), driver=DRIVER, node=NODE, now=LATER) is None


def test_a_mig_device_reports_its_parent_profile_and_a_dynamic_partition_its_created_uuid(
    tmp_path: Path,
) -> None:
    layout = [{"profile": "3g.71gb"}, {"profile": "4g.71gb"}]
    inventory = inventory_file(tmp_path, [{"profile": "h200", "mig": layout}])
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    plugin = GpuDriver(emulation(release="")).node(
        NODE, inventory, dirs=dirs, boot_id=BOOT, get_claim=lambda ns, n: {}
    )
    plugin.set_node(copy.deepcopy(NODE_OBJ))
    devices, _ = plugin.device_state()
    name, device = next((n, d) for n, d in devices.items() if d.mig is not None)
    new = devicestatus.prepared_devices(
        allocated(result(name)), {name}, devices, driver=DRIVER, node=NODE, now=NOW
    )
    assert new is not None
    assert device.mig is not None and new[0]["data"] == {
        "type": "mig",
        "uuid": device.uuid,
        "productName": device.product_name,
        "pciBusID": device.pci_bus_id,
        "parentUUID": device.parent_uuid,
        "profile": device.mig.profile,
    }
    # A DynamicMIG partition has no UUID until Prepare creates it: the one its claim got.
    partition = {name: dataclasses.replace(device, uuid="")}
    claim = allocated(result(name))
    [entry] = devicestatus.prepared_devices(claim, {name}, partition, driver=DRIVER, node=NODE, now=NOW) or []
    assert entry["data"]["uuid"] == mig.created_for_claim(partition[name], ref(1).uid).uuid
    assert entry["data"]["uuid"].startswith("MIG-") and entry["data"]["uuid"] != device.uuid


def test_unprepare_removes_only_our_entries_of_this_node() -> None:
    ours = {"driver": DRIVER, "pool": NODE, "device": "gpu-0", "conditions": []}
    elsewhere = ours | {"pool": "another-node"}
    claim = allocated(result("gpu-0"), devices=[FOREIGN, ours, elsewhere])
    assert devicestatus.unprepared_devices(claim, driver=DRIVER, node=NODE) == [FOREIGN, elsewhere]
    assert devicestatus.unprepared_devices(allocated(devices=[FOREIGN]), driver=DRIVER, node=NODE) is None


class Api:
    """The claim's API server: GET and PUT of its status, with resourceVersion preconditions and queued
    failures."""

    def __init__(self, claim: dict[str, Any]) -> None:
        self.claim = claim
        self.calls: list[str] = []
        self.failures: list[int] = []

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.calls.append("GET")
        if self.failures and self.failures[0] == 404:
            raise ApiException(status=self.failures.pop(0))
        return copy.deepcopy(self.claim)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("PUT")
        assert path == CLAIM_PATH
        json.dumps(body)  # sent as JSON
        if self.failures:
            raise ApiException(status=self.failures.pop(0))
        if body["metadata"]["resourceVersion"] != self.claim["metadata"]["resourceVersion"]:
            raise ApiException(status=409)
        self.claim = copy.deepcopy(body)
        self.claim["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        return copy.deepcopy(self.claim)


def gpu_node(tmp_path: Path, api: Api, *, device_status: bool = True) -> Any:
    inventory = inventory_file(tmp_path, [{"profile": "t10"}])
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    driver = GpuDriver(emulation(release=""), device_status=api.replace if device_status else None)
    plugin = driver.node(NODE, inventory, dirs=dirs, boot_id=BOOT, get_claim=api.get_claim)
    plugin.set_node(copy.deepcopy(NODE_OBJ))
    return plugin


def test_the_plugin_writes_after_prepare_and_removes_after_unprepare(tmp_path: Path) -> None:
    api = Api(allocated(result("gpu-0"), devices=[FOREIGN]))
    plugin = gpu_node(tmp_path, api)
    assert claims.prepare(plugin, [ref(1)], api.get_claim)[ref(1).uid].error == ""
    assert api.calls == ["GET", "PUT"]  # the runtime's read, then the status as read
    foreign, entry = api.claim["status"]["devices"]
    assert foreign == FOREIGN and entry["device"] == "gpu-0"
    slice_uuid = plugin.device_state()[0]["gpu-0"].uuid
    assert entry["data"]["uuid"] == slice_uuid and entry["conditions"][0]["status"] == "True"
    assert api.claim["status"]["allocation"] == allocated(result("gpu-0"))["status"]["allocation"]

    api.calls.clear()
    assert claims.prepare(plugin, [ref(1)], api.get_claim)[ref(1).uid].error == ""
    assert api.calls == ["GET"]  # already so: no write

    api.calls.clear()
    assert plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert api.calls == ["GET", "PUT"] and api.claim["status"]["devices"] == [FOREIGN]
    api.calls.clear()
    assert plugin.unprepare([ref(1)]) == {ref(1).uid: ""}  # unknown: nothing of ours left, no write
    assert "PUT" not in api.calls


def test_a_conflict_is_read_again_and_a_refusal_never_fails_the_claim(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Api(allocated(result("gpu-0")))
    plugin = gpu_node(tmp_path, api)
    api.failures = [409]
    assert claims.prepare(plugin, [ref(1)], api.get_claim)[ref(1).uid].error == ""
    assert api.calls == ["GET", "PUT", "GET", "PUT"]
    assert [e["device"] for e in api.claim["status"]["devices"]] == ["gpu-0"]

    api.failures = [403]
    assert plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert "status.devices not written" in caplog.text and "gpu-0" in json.dumps(api.claim["status"])
    api.failures, api.calls = [404, 404], []  # the claim is gone: nothing to do, no warning
    caplog.clear()
    assert plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert "not written" not in caplog.text and "PUT" not in api.calls


def test_off_by_default_no_write(tmp_path: Path) -> None:
    api = Api(allocated(result("gpu-0")))
    plugin = gpu_node(tmp_path, api, device_status=False)
    assert claims.prepare(plugin, [ref(1)], api.get_claim)[ref(1).uid].error == ""
    assert plugin.unprepare([ref(1)]) == {ref(1).uid: ""}
    assert api.calls == ["GET"] and "devices" not in api.claim["status"]


def test_the_switch_reaches_serve_and_the_fleet_and_the_clusters_fleet() -> None:
    from fakeplugin.cli import build_parser
    from fakeplugin.cluster.components import fleet_argv
    from fakeplugin.cluster.layout import StateLayout
    from fakeplugin.commands.fleet import fleet_drivers

    parse = build_parser().parse_args
    assert parse(["serve", "--device-status"]).device_status and not parse(["serve"]).device_status
    fleet = parse(["fleet", "--inventory", "i.yaml", "--device-status"])
    api = Api(allocated())
    [gpus] = fleet_drivers(fleet, "", kube=api)  # type: ignore[arg-type]  # only its replace is taken
    assert gpus.device_status == api.replace  # type: ignore[attr-defined]
    [plain] = fleet_drivers(parse(["fleet", "--inventory", "i.yaml"]), "", kube=None)  # type: ignore[arg-type]
    assert plain.device_status is None  # type: ignore[attr-defined]
    argv = fleet_argv(
        "python", Path("i.yaml"), StateLayout(Path("/tmp/x")), ["--device-status", "--device-health"]
    )
    assert "--device-status" in argv and "--device-health" not in argv


def test_karpenters_render_of_the_fleets_flags_leaves_the_prepare_only_ones_out(tmp_path: Path) -> None:
    from fakeplugin.cluster.karpenter import render_instance_types

    doc = yaml.safe_load(inventory_file(tmp_path, [{"profile": "t10"}]).path.read_text())
    doc["nodes"] = [{"instanceType": {"name": "gpu-t10", "price": 1}, "gpus": [{"profile": "t10"}]}]
    path = tmp_path / "types.yaml"
    path.write_text(yaml.safe_dump(doc))
    rendered = render_instance_types(path, ["--device-status", "--fake-device-nodes"], "v1.37.2")
    assert [t["name"] for t in json.loads(rendered)] == ["gpu-t10"]  # `render` took the rest


def test_serve_refuses_it_for_compute_domains(tmp_path: Path) -> None:
    from fakeplugin.cli import build_parser
    from fakeplugin.commands.serve import run

    inventory = inventory_file(tmp_path, [{"profile": "t10"}]).path
    args = build_parser().parse_args(
        [
            "serve",
            "--plugin",
            "compute-domains",
            "--device-status",
            "--inventory",
            str(inventory),
            "--node-name",
            NODE,
        ]
    )
    with pytest.raises(
        ValueError, match="--device-status reports GPU and MIG devices: only with --plugin gpus"
    ):
        run(args)
