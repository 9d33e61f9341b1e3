"""The daemon's Kubernetes part (drivers.computedomain.daemon), the `compute-domain-daemon` command's
`check`, and `serve --emulate-daemon` (the plugin doing the daemon's part at a daemon claim's Prepare and
Unprepare), against an in-memory API that keeps objects by path and checks resourceVersions."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.daemon import (
    READY,
    STATE_FILE,
    CliqueMember,
    DaemonError,
    DaemonRun,
    Identity,
    next_index,
    pod_ready,
)
from fakeplugin.drivers.computedomain.plugin import ComputeDomainDriver
from fakeplugin.faults.daemonfaults import LEFT_CLIQUE_ANNOTATION, NOT_READY_ANNOTATION
from fakeplugin.inventory.file import InventoryFile
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
from tests.harness.kube import wait_for

CLIQUE = api.clique_path(NAMESPACE, api.clique_name(CD_UID, CLIQUE_ID))
POD = f"/api/v1/namespaces/{NAMESPACE}/pods/daemon-pod"
NODE_IP = "10.1.2.3"


class StoreApi(Api):
    """Api (the plugin's calls) plus the generic ones the daemon makes, over one store of objects by path."""

    def __init__(self) -> None:
        super().__init__()
        pod = {"metadata": {"name": "daemon-pod", "labels": {}, "resourceVersion": "1"}}
        self.store: dict[str, dict[str, Any]] = {POD: pod}
        self.node["status"] = {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}
        self.conflicts = 0  # the next replaces that fail with 409

    def compute_domain_clique(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(api.clique_path(namespace, name))

    def get(self, path: str) -> dict[str, Any]:
        if path not in self.store:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.store[path])

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        full = f"{path}/{body['metadata']['name']}"
        if full in self.store:
            raise ApiException(status=409, reason="AlreadyExists")
        self.store[full] = copy.deepcopy(body)
        self.store[full]["metadata"]["resourceVersion"] = "1"
        return self.get(full)

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        current = self.store[path]["metadata"]["resourceVersion"]
        if self.conflicts or body["metadata"].get("resourceVersion") != current:
            self.conflicts = max(0, self.conflicts - 1)
            raise ApiException(status=409, reason="Conflict")
        self.store[path] = copy.deepcopy(body)
        self.store[path]["metadata"]["resourceVersion"] = str(int(current) + 1)
        return self.get(path)

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.store[path]["metadata"].setdefault("labels", {}).update(body["metadata"]["labels"])
        return self.get(path)

    def watch(self, path: str, **_: Any) -> Iterator[dict[str, Any]]:
        time.sleep(0.02)  # no events: the informer lists again (GET) after each short watch
        yield from ()

    def daemons(self) -> list[dict[str, Any]]:
        return self.store[CLIQUE].get("daemons") or []


def who(node: str = NODE, ip: str = NODE_IP, **kw: Any) -> Identity:
    return Identity(CD_UID, CLIQUE_ID, node, ip, NAMESPACE, **kw)


def test_the_lowest_free_index_and_the_limit() -> None:
    assert next_index([], 18) == 0
    assert next_index([{"index": 0}, {"index": 2}], 18) == 1
    with pytest.raises(DaemonError, match=r"no available indices within maxNodesPerIMEXDomain \(2\)"):
        next_index([{"index": 0}, {"index": 1}], 2)


def test_pod_ready_needs_running_and_the_ready_condition() -> None:
    ready = {"type": "Ready", "status": "True"}
    assert pod_ready({"status": {"phase": "Running", "conditions": [ready]}})
    assert not pod_ready({"status": {"phase": "Pending", "conditions": [ready]}})
    assert not pod_ready({"status": {"phase": "Running", "conditions": [{**ready, "status": "False"}]}})


def test_join_ready_and_leave_as_nvidias_daemon() -> None:
    kube = StoreApi()
    other = CliqueMember(kube, who("gb200-a-1", "10.1.2.9"), sleep=lambda _: None)  # type: ignore[arg-type]
    other.join()
    member = CliqueMember(kube, who(pod_name="daemon-pod", pod_uid="p-1"), sleep=lambda _: None)  # type: ignore[arg-type]
    member.label_pod()
    assert kube.store[POD]["metadata"]["labels"] == {api.CLIQUE_ID_LABEL: CLIQUE_ID}
    kube.conflicts = 2  # a concurrent writer: read again, retry
    member.join()
    clique = kube.store[CLIQUE]
    assert clique["metadata"]["labels"] == {api.COMPUTE_DOMAIN_LABEL: CD_UID, api.CLIQUE_ID_LABEL: CLIQUE_ID}
    assert clique["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "daemon-pod", "uid": "p-1"}
    ]
    mine = {"nodeName": NODE, "ipAddress": NODE_IP, "cliqueID": CLIQUE_ID, "index": 1, "status": "NotReady"}
    assert kube.daemons()[1] == mine
    member.join()  # nothing changes: no write
    assert kube.store[CLIQUE]["metadata"]["resourceVersion"] == clique["metadata"]["resourceVersion"]
    member.set_ready(True)
    assert kube.daemons()[1]["status"] == "Ready"
    member.leave()
    assert [d["nodeName"] for d in kube.daemons()] == ["gb200-a-1"]
    other.leave()
    other.leave()  # nothing left: no error
    with pytest.raises(DaemonError, match="daemon info not yet listed in CDClique"):
        member.set_ready(True)


def test_run_enters_the_clique_mirrors_readiness_and_the_fault_and_leaves_at_stop(tmp_path: Path) -> None:
    kube = StoreApi()
    node_path = f"/api/v1/nodes/{NODE}"
    kube.store[node_path] = copy.deepcopy(kube.node)
    kube.store[POD]["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    state = tmp_path / STATE_FILE
    member = CliqueMember(kube, who(pod_name="daemon-pod", pod_uid="p-1"))  # type: ignore[arg-type]
    stop = threading.Event()
    runner = threading.Thread(target=DaemonRun(kube, member, state).run, args=(stop,))  # type: ignore[arg-type]
    runner.start()
    try:
        wait_for(lambda: CLIQUE in kube.store and kube.daemons(), what="the entry", timeout=10)
        assert kube.daemons()[0]["status"] == "NotReady"  # the pod is not Ready yet
        wait_for(lambda: state.exists() and state.read_text() == READY, what="check's READY", timeout=10)
        kube.store[POD]["status"]["conditions"][0]["status"] = "True"  # the probe passed
        wait_for(lambda: kube.daemons()[0]["status"] == "Ready", what="Ready", timeout=10)
        kube.store[node_path]["metadata"]["annotations"] = {NOT_READY_ANNOTATION: "test"}
        wait_for(lambda: state.read_text() != READY, what="the fault in the state file", timeout=10)
    finally:
        stop.set()
        runner.join(10)
    assert kube.daemons() == [] and not state.exists()


def test_check_answers_from_the_state_file(tmp_path: Path) -> None:
    def check(clique: str) -> subprocess.CompletedProcess[str]:
        argv = [
            sys.executable,
            "-m",
            "fakeplugin",
            "compute-domain-daemon",
            "check",
            "--imex-dir",
            str(tmp_path),
        ]
        env = {**os.environ, "CLIQUE_ID": clique}
        return subprocess.run(argv, capture_output=True, text=True, env=env, check=False)

    assert check("").stdout == "check succeeded (noop, clique ID is empty)\n"
    assert check(CLIQUE_ID).returncode == 1
    (tmp_path / STATE_FILE).write_text("NOT READY\n")
    failed = check(CLIQUE_ID)
    assert failed.returncode == 1 and "IMEX daemon not ready: NOT READY" in failed.stderr
    (tmp_path / STATE_FILE).write_text(READY)
    assert check(CLIQUE_ID).returncode == 0


@pytest.fixture
def emulating(tmp_path: Path) -> Any:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory(clique=2, clusterUUID=CLUSTER)))
    kube = StoreApi()
    driver = ComputeDomainDriver(
        emulation(release="", driver_name=CD_DRIVER),
        kube,
        namespace=NAMESPACE,
        emulate_daemon=True,
        retry_seconds=0,
    )
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugins" / CD_DRIVER)
    plugin = driver.node(NODE, InventoryFile(inv), dirs=dirs, boot_id=BOOT, get_claim=kube.get_claim)
    plugin.set_node(kube.node)
    return Hosted(plugin, kube.get_claim), kube


def test_emulated_daemon_enters_the_clique_at_prepare_and_leaves_at_unprepare(emulating: Any) -> None:
    plugin, kube = emulating
    channel = add_claim(kube, "c1", "channel-0")
    assert plugin.prepare([channel])["c1"].error.endswith("current node not ready in ComputeDomain")
    daemon = add_claim(kube, "d1", "daemon-0", namespace=NAMESPACE)
    reserved = [{"resource": "pods", "name": "daemon-pod", "uid": "p-1"}]
    kube.claims[(NAMESPACE, "claim-d1")]["status"]["reservedFor"] = reserved
    assert plugin.prepare([daemon])["d1"].error == ""
    assert kube.store[POD]["metadata"]["labels"] == {api.CLIQUE_ID_LABEL: CLIQUE_ID}
    assert kube.daemons() == [
        {"nodeName": NODE, "ipAddress": NODE_IP, "cliqueID": CLIQUE_ID, "index": 0, "status": "Ready"}
    ]
    assert plugin.prepare([channel])["c1"].error == ""

    faulted = copy.deepcopy(kube.node)
    faulted["metadata"]["annotations"] = {NOT_READY_ANNOTATION: "test"}
    plugin.set_node(faulted)
    assert kube.daemons()[0]["status"] == "NotReady"
    plugin.set_node(kube.node)
    assert kube.daemons()[0]["status"] == "Ready"

    assert plugin.unprepare([daemon]) == {"d1": ""}
    assert kube.daemons() == []


def test_emulated_daemon_of_a_faulted_node_stays_not_ready(emulating: Any) -> None:
    plugin, kube = emulating
    kube.node["metadata"]["annotations"] = {NOT_READY_ANNOTATION: "test"}
    plugin.set_node(kube.node)
    daemon = add_claim(kube, "d2", "daemon-0", namespace=NAMESPACE)
    assert plugin.prepare([daemon])["d2"].error == ""
    assert kube.daemons()[0]["status"] == "NotReady"
    channel = add_claim(kube, "c2", "channel-0")
    assert plugin.prepare([channel])["c2"].error.endswith("current node not ready in ComputeDomain")


def test_run_leaves_the_clique_while_the_node_has_the_fault_and_enters_again(tmp_path: Path) -> None:
    kube = StoreApi()
    node_path = f"/api/v1/nodes/{NODE}"
    kube.store[node_path] = copy.deepcopy(kube.node)
    kube.store[POD]["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    other = {"nodeName": "gb200-a-1", "ipAddress": "10.9.9.9", "cliqueID": CLIQUE_ID, "status": "Ready"}
    kube.store[CLIQUE] = {"metadata": {"name": CLIQUE.rsplit("/", 1)[1], "resourceVersion": "1"}}
    kube.store[CLIQUE]["daemons"] = [{**other, "index": 1}]
    state = tmp_path / STATE_FILE
    member = CliqueMember(kube, who(pod_name="daemon-pod", pod_uid="p-1"))  # type: ignore[arg-type]
    stop = threading.Event()
    runner = threading.Thread(target=DaemonRun(kube, member, state).run, args=(stop,))  # type: ignore[arg-type]
    runner.start()
    try:
        wait_for(lambda: mine(kube).get("status") == "Ready", what="Ready", timeout=10)
        assert mine(kube)["index"] == 0
        wait_for(lambda: state.read_text() == READY, what="check's READY", timeout=10)
        kube.store[node_path]["metadata"]["annotations"] = {LEFT_CLIQUE_ANNOTATION: "tray lost NVLink"}
        wait_for(lambda: [d["nodeName"] for d in kube.daemons()] == ["gb200-a-1"], what="left", timeout=10)
        wait_for(lambda: state.read_text() != READY, what="check fails while out", timeout=10)
        # Pod events while out of the clique enter nothing; meanwhile another node takes index 0.
        time.sleep(0.3)
        assert [d["nodeName"] for d in kube.daemons()] == ["gb200-a-1"]
        third = {**other, "nodeName": "gb200-a-2", "ipAddress": "10.9.9.8", "index": 0}
        kube.store[CLIQUE]["daemons"].append(third)
        kube.store[node_path]["metadata"]["annotations"] = {}
        wait_for(lambda: mine(kube).get("status") == "Ready", what="Ready again", timeout=10)
        assert mine(kube)["index"] == 2  # entered as a new daemon does: the lowest free index
        wait_for(lambda: state.read_text() == READY, what="check's READY again", timeout=10)
    finally:
        stop.set()
        runner.join(10)
    assert [d["nodeName"] for d in kube.daemons()] == ["gb200-a-1", "gb200-a-2"]


def mine(kube: StoreApi) -> dict[str, Any]:
    return next((d for d in kube.daemons() if d["nodeName"] == NODE), {}) if CLIQUE in kube.store else {}


def test_emulated_daemon_leaves_the_clique_with_the_fault_and_enters_again(emulating: Any) -> None:
    plugin, kube = emulating
    daemon = add_claim(kube, "d3", "daemon-0", namespace=NAMESPACE)
    channel = add_claim(kube, "c3", "channel-0")
    assert plugin.prepare([daemon])["d3"].error == ""
    assert plugin.prepare([channel])["c3"].error == ""

    left = copy.deepcopy(kube.node)
    left["metadata"]["annotations"] = {LEFT_CLIQUE_ANNOTATION: "test"}
    plugin.set_node(left)
    assert kube.daemons() == []
    # The node is no longer Ready in its ComputeDomain: a new channel claim there waits.
    assert plugin.unprepare([channel]) == {"c3": ""}
    assert plugin.prepare([channel])["c3"].error.endswith("current node not ready in ComputeDomain")

    both = copy.deepcopy(left)
    both["metadata"]["annotations"][NOT_READY_ANNOTATION] = "test"
    plugin.set_node(both)
    assert kube.daemons() == []  # still out: not ready too, but no entry to show it
    back = copy.deepcopy(kube.node)
    back["metadata"]["annotations"] = {NOT_READY_ANNOTATION: "test"}
    plugin.set_node(back)
    assert kube.daemons() == [
        {"nodeName": NODE, "ipAddress": NODE_IP, "cliqueID": CLIQUE_ID, "index": 0, "status": "NotReady"}
    ]
    plugin.set_node(kube.node)
    assert kube.daemons()[0]["status"] == "Ready"
    assert plugin.prepare([channel])["c3"].error == ""


def test_emulated_daemon_prepared_on_a_node_out_of_its_clique_enters_when_the_fault_goes(
    emulating: Any,
) -> None:
    plugin, kube = emulating
    kube.node["metadata"]["annotations"] = {LEFT_CLIQUE_ANNOTATION: "test"}
    plugin.set_node(copy.deepcopy(kube.node))
    daemon = add_claim(kube, "d4", "daemon-0", namespace=NAMESPACE)
    assert plugin.prepare([daemon])["d4"].error == ""
    assert kube.store[POD]["metadata"]["labels"] == {}  # no reservedFor: no pod to label
    assert CLIQUE not in kube.store  # not entered, so not made either
    kube.node["metadata"]["annotations"] = {}
    plugin.set_node(copy.deepcopy(kube.node))
    assert [d["status"] for d in kube.daemons()] == ["Ready"]
