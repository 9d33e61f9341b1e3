"""NodeDevices (publish.node): one node's devices and desired slices, live from the inventory file."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import releases
from fakeplugin.drivers.gpu.prepare.resolve import Resolver, pool_reader
from fakeplugin.drivers.gpu.publish.node import NodeDevices, node_devices
from fakeplugin.faults.claimfaults import Injector
from fakeplugin.inventory import InventoryError, load_inventory
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef
from fakeplugin.render import render_documents
from fakeplugin.runtime.driver import Claim
from tests.harness import DRIVER


def write(path: Path, nodes: list[dict[str, Any]]) -> Path:
    doc = {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": nodes}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_named_node_has_devices_before_the_api_server_answers(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10", "count": 2}]}])
    devices = NodeDevices(path, "n", driver=DRIVER)
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    assert devices["gpu-1"].product_name == "NVIDIA T10"


def test_an_edit_reaches_prepare_before_the_publisher_runs(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10", "count": 1}]}])
    devices = NodeDevices(path, "n", driver=DRIVER)
    write(path, [{"name": "n", "gpus": [{"profile": "t10", "count": 1}, {"profile": "l40s"}]}])
    assert devices.reload_if_changed() is True
    # No set_node (no API server round trip) in between: the Mapping the Preparer reads is new already.
    assert devices["gpu-1"].product_name == "NVIDIA L40S"
    assert devices.reload_if_changed() is False  # same content: nothing to do


def test_a_broken_edit_keeps_the_last_good_inventory(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10", "count": 2}]}])
    devices = NodeDevices(path, "n", driver=DRIVER)
    write(path, [{"name": "n", "gpus": [{"profile": "no-such-gpu"}]}])
    assert devices.reload_if_changed() is False
    assert sorted(devices) == ["gpu-0", "gpu-1"]


def test_a_broken_first_load_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "no-such-gpu"}]}])
    with pytest.raises(InventoryError, match=r"inv\.yaml: nodes\[0\]\.gpus\[0\]\.profile"):
        NodeDevices(path, "n", driver=DRIVER)


def test_selector_node_waits_for_its_labels_then_publishes_what_render_prints(tmp_path: Path) -> None:
    entry = {"selector": {"matchLabels": {"gpu": "a5000"}}, "gpus": [{"profile": "rtx-a5000"}]}
    path = write(tmp_path / "inv.yaml", [entry])
    devices = NodeDevices(path, "w7", driver=DRIVER)
    assert len(devices) == 0  # labels unknown: nothing to publish or prepare yet
    devices.set_node({"gpu": "a5000"}, "uid-w7")
    assert list(devices) == ["gpu-0"]
    rendered = render_documents(load_inventory(path), node="w7", labels={"gpu": "a5000"}, node_uid="uid-w7")
    assert devices.desired_slices() == [d for d in rendered if d["kind"] == "ResourceSlice"]
    devices.set_node({"gpu": "other"}, "uid-w7")  # relabelled: the node no longer matches
    assert len(devices) == 0 and devices.desired_slices() == []


def test_node_devices_is_empty_for_a_node_no_entry_serves(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10"}]}]))
    assert node_devices(inv, "elsewhere", {}) == []


def test_the_release_is_fixed_at_start_and_a_changed_driver_release_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10"}]}])
    devices = NodeDevices(path, "n", driver=DRIVER)
    devices.set_node({}, "uid-n")
    assert [s["metadata"]["generateName"] for s in devices.desired_slices()] == [f"00000-{DRIVER}-n-"]
    doc = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**doc, "driverRelease": "0.5.0", "cudaDriverVersion": "12.8"}))
    assert devices.reload_if_changed() is True
    assert "driverRelease" not in caplog.text  # the default release, spelled out
    path.write_text(yaml.safe_dump({**doc, "driverRelease": "25.12"}))
    assert devices.reload_if_changed() is True
    assert f"{path} now says driverRelease 25.12; this plugin emulates 0.5.0 until it restarts" in caplog.text
    assert [s["metadata"]["generateName"] for s in devices.desired_slices()] == [f"00000-{DRIVER}-n-"]

    started_as_25_12 = NodeDevices(path, "n", driver=DRIVER, release=releases.get("25.12"))
    started_as_25_12.set_node({}, "uid-n")
    assert [s["metadata"]["generateName"] for s in started_as_25_12.desired_slices()] == [f"n-{DRIVER}-"]


def test_a_snapshot_keeps_the_devices_it_was_taken_with(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", [{"name": "n", "gpus": [{"profile": "t10", "count": 2}]}])
    devices = NodeDevices(path, "n", driver=DRIVER)
    before = devices.snapshot()
    write(path, [{"name": "n", "gpus": [{"profile": "l40s"}]}])
    assert devices.reload_if_changed() is True
    assert sorted(before) == ["gpu-0", "gpu-1"]
    assert before["gpu-0"].product_name == "NVIDIA T10"
    assert devices.snapshot()["gpu-0"].product_name == "NVIDIA L40S"
    with pytest.raises(TypeError):
        before["gpu-9"] = before["gpu-0"]  # type: ignore[index]  # read-only: it is the live dict itself


def test_prepare_reads_one_consistent_pool_while_the_inventory_switches(tmp_path: Path) -> None:
    # A reload between a reader's keys and its items must not show it a device that is gone (KeyError,
    # "unexpected failure" in Prepare): a tiny switch interval makes such interleavings frequent.
    four = write(tmp_path / "four.yaml", [{"name": "n", "gpus": [{"profile": "t10", "count": 4}]}])
    one = load_inventory(write(tmp_path / "one.yaml", [{"name": "n", "gpus": [{"profile": "t10"}]}]))
    shared = InventoryFile(four)
    devices = NodeDevices(shared, "n", driver=DRIVER)
    both = (shared.inventory, one)
    ref = ClaimRef(namespace="ns", uid="6f1c0a3e-aaaa-4bbb-8ccc-dddddddddddd", name="c")
    result = {"request": "gpu", "driver": DRIVER, "pool": "n", "device": "gpu-0"}  # in both inventories
    claim = {
        "metadata": {"namespace": "ns", "name": "c", "uid": ref.uid},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }
    resolver = Resolver(
        driver_name=DRIVER,
        node_name="n",
        pool=pool_reader(devices),
        faults=Injector(lambda namespace, name: claim, lambda seconds: None),
        feature_gates={},
        release=releases.get(None),
        shared=False,
    )
    done = threading.Event()

    def switch() -> None:
        for i in range(1_000_000):  # bounded; ends as soon as the reader is done
            if done.is_set():
                return
            shared.inventory = both[i % 2]  # what InventoryFile.reload_if_changed does
            devices.refresh()

    failures: list[str] = []
    pools: set[int] = set()
    interval = sys.getswitchinterval()
    switcher = threading.Thread(target=switch)
    sys.setswitchinterval(1e-6)
    try:
        switcher.start()
        for _ in range(100_000):  # before the fix: from 3 to 70 of them failed
            try:
                request = resolver.resolve(Claim(ref, claim))
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            assert request is not None
            pools.add(len(request.pool))
    finally:
        done.set()
        switcher.join()
        sys.setswitchinterval(interval)
    assert not failures, f"{len(failures)} resolves failed: {sorted(set(failures))}"
    assert pools <= {1, 4}, "every pool is one inventory's, never a mix"
