"""The driver-neutral runtime (fakeplugin.runtime): what is emulated, the served nodes, retries, and a
driver of our own hosted beside gpu.nvidia.com with no runtime change."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import consumableshares
from fakeplugin.drivers.computedomain import ComputeDomainDriver
from fakeplugin.drivers.gpu import GpuDriver
from fakeplugin.faults import claimfaults
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.runtime import bootid, claims
from fakeplugin.runtime import nodes as runtime_nodes
from fakeplugin.runtime.claims import CheckedClaims
from fakeplugin.runtime.driver import Claim, DeviceHealth, DeviceStates, GetClaim, NodeDirs, NodePlugin
from fakeplugin.runtime.emulation import emulation
from fakeplugin.runtime.nodes import Nodes
from fakeplugin.runtime.retry import Backoff
from tests.harness.computedomain import CD_DRIVER, Api
from tests.harness.prepare import BOOT, claim_object, result
from tests.harness.prepare import ref as prepare_ref

SERVER = (1, 35)


def write(path: Path, nodes: list[dict[str, Any]]) -> Path:
    doc = {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": nodes}
    path.write_text(yaml.safe_dump(doc))
    return path


def node_obj(name: str, *, uid: str = "", labels: dict[str, str] | None = None, kwok: bool = False) -> dict:
    annotations = {"kwok.x-k8s.io/node": "fake"} if kwok else {}
    meta = {"name": name, "uid": uid or f"uid-{name}", "labels": labels or {}, "annotations": annotations}
    return {"metadata": meta}


# -- what is emulated ------------------------------------------------------------------------------------


def test_emulation_applies_the_gates_to_the_release_once() -> None:
    e = emulation(release="0.5.0-dev", feature_gates="DRAListTypeAttributes=true,DynamicMIG=true")
    assert e.release.name == "0.5.0-dev" and e.release.list_type_attributes is True
    assert e.dynamic_mig is True and e.feature_gates["DRAListTypeAttributes"] is True
    with pytest.raises(TypeError):
        e.feature_gates["DynamicMIG"] = False  # type: ignore[index]
    assert "feature gates: DRAListTypeAttributes, DynamicMIG" in e.describe()
    assert emulation(release="").release.name == "0.5.0"  # the default


def test_emulation_errors_name_the_flag() -> None:
    with pytest.raises(ValueError, match="--feature-gates: unknown feature gate 'Nope'"):
        emulation(release="25.12", feature_gates="Nope=true")
    with pytest.raises(ValueError, match=r"--consumable-shares memory: NVIDIA driver release 25\.12"):
        emulation(release="25.12", consumable_shares="memory")
    shares = emulation(release="0.5.0-dev", feature_gates="ConsumableShares=true", consumable_shares="memory")
    assert shares.consumable_shares == "memory" != consumableshares.DISABLED
    assert "consumable shares: memory" in shares.describe()


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff(1.0, 8.0)
    assert [backoff.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.failed() == 1.0


# -- the served nodes, with gpu.nvidia.com -------------------------------------------------------------


def gpu_nodes(tmp_path: Path, entries: list[dict[str, Any]], release: str = "", **kw: Any) -> Nodes:
    inventory = InventoryFile(write(tmp_path / "inv.yaml", entries))
    driver = GpuDriver(emulation(release=release))

    def make(name: str) -> NodePlugin:
        dirs = NodeDirs(cdi_root=tmp_path / name / "cdi", plugin_dir=tmp_path / name / "plugin")
        return driver.node(name, inventory, dirs=dirs, boot_id=BOOT, get_claim=lambda ns, n: {}, quiet=True)

    return Nodes(inventory, make, **kw)


def test_a_node_publishes_only_once_its_node_object_was_seen(tmp_path: Path) -> None:
    nodes = gpu_nodes(tmp_path, [{"name": "n1", "gpus": [{"profile": "t10", "count": 2}]}])
    plugin = nodes.add("n1")  # serve: made at start, devices known from the inventory alone
    assert sorted(plugin.devices) == ["gpu-0", "gpu-1"]
    assert nodes.get("n1") is None and nodes.names() == [] and nodes.desired("n1", SERVER) is None
    nodes.on_list([node_obj("n1", uid="u1")])
    assert nodes.changed.is_set() and nodes.get("n1") is plugin
    [pool] = nodes.desired("n1", SERVER) or []
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert [d["name"] for d in pool["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_a_fleet_takes_the_nodes_it_accepts_and_keeps_a_dropped_nodes_plugin(tmp_path: Path) -> None:
    entries = [{"namePrefix": "sim-", "replicas": 2, "gpus": [{"profile": "h100-80gb-hbm3"}]}]
    nodes = gpu_nodes(
        tmp_path, entries, accept=lambda n: "kwok.x-k8s.io/node" in n["metadata"]["annotations"]
    )
    nodes.on_list([node_obj("sim-0", kwok=True), node_obj("sim-1", kwok=True), node_obj("real")])
    assert nodes.names() == ["sim-0", "sim-1"]
    plugin = nodes.get("sim-1")
    nodes.changed.clear()
    nodes.on_event("DELETED", node_obj("sim-1", kwok=True))
    assert nodes.changed.is_set() and nodes.names() == ["sim-0"] and nodes.get("sim-1") is None
    nodes.on_event("ADDED", node_obj("sim-1", kwok=True))
    assert nodes.get("sim-1") is plugin  # one plugin per node name: one prepare side per node's files
    nodes.on_list([node_obj("sim-0", kwok=True)])  # a relist without sim-1: gone again
    assert nodes.names() == ["sim-0"]


def test_the_inventory_poll_hands_an_edit_to_every_node(tmp_path: Path, monkeypatch: Any) -> None:
    nodes = gpu_nodes(tmp_path, [{"namePrefix": "n", "replicas": 2, "gpus": [{"profile": "t10"}]}])
    nodes.on_list([node_obj("n0"), node_obj("n1")])
    nodes.changed.clear()
    write(
        tmp_path / "inv.yaml", [{"namePrefix": "n", "replicas": 2, "gpus": [{"profile": "t10", "count": 3}]}]
    )
    stop = threading.Event()
    monkeypatch.setattr(runtime_nodes, "INVENTORY_POLL_SECONDS", 0.01)
    poll = threading.Thread(target=nodes.poll_inventory, args=(stop,))
    poll.start()
    assert nodes.changed.wait(10)
    stop.set()
    poll.join()
    desired = {n: nodes.desired(n, SERVER) or [] for n in nodes.names()}
    assert {n: len(s[0]["spec"]["devices"]) for n, s in desired.items()} == {"n0": 3, "n1": 3}


def test_the_nodes_unprepare_faults_annotation_makes_unprepare_read_the_claim(tmp_path: Path) -> None:
    claim = claim_object(prepare_ref(1), result("gpu-0", pool="n1"))
    fetched: list[str] = []

    def get_claim(namespace: str, name: str) -> dict[str, Any]:
        fetched.append(name)
        return claim

    inventory = InventoryFile(write(tmp_path / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "t10"}]}]))
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    driver = GpuDriver(emulation(release=""))
    plugin = driver.node("n1", inventory, dirs=dirs, boot_id=BOOT, get_claim=get_claim)
    plugin.set_node(node_obj("n1"))
    ref = prepare_ref(1)
    assert claims.prepare(plugin, [ref], get_claim)[ref.uid].error == ""
    claim["metadata"]["annotations"] = {claimfaults.UNPREPARE_ERROR: "stuck"}  # after Prepare
    annotated = node_obj("n1")
    annotated["metadata"]["annotations"][claimfaults.UNPREPARE_FAULTS] = "true"
    plugin.set_node(annotated)
    fetched.clear()
    assert plugin.unprepare([ref]) == {ref.uid: f"error unpreparing devices for claim {ref}: stuck"}
    assert fetched == [ref.name]

    plugin.set_node(node_obj("n1"))  # removed: the claim had no unprepare-error at Prepare, but it
    assert plugin.unprepare([ref])[ref.uid]  # failed once, so it is read again (and still fails)
    claim["metadata"]["annotations"] = {}
    assert plugin.unprepare([ref]) == {ref.uid: ""}


# -- a second driver, on the same runtime -----------------------------------------------------------------


class EchoNode:
    """A NodePlugin of a driver that is not gpu.nvidia.com: one device per node, prepared as its name;
    it records what the runtime hands it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._uid = ""
        self.prepared: list[Claim] = []
        self.unprepared: list[ClaimRef] = []
        self.closed = 0

    @property
    def node_name(self) -> str:
        return self._name

    @property
    def devices(self) -> Collection[str]:
        return ["echo-0"]

    def set_node(self, node: dict) -> bool:
        changed, self._uid = self._uid != node["metadata"]["uid"], node["metadata"]["uid"]
        return changed

    def refresh(self) -> bool:
        return False

    def desired_slices(self, server_version: tuple[int, int]) -> list[dict]:
        pool = {"name": self._name, "generation": 1, "resourceSliceCount": 1}
        spec = {"driver": "echo.example.com", "nodeName": self._name, "pool": pool}
        return [{"spec": {**spec, "devices": [{"name": "echo-0"}]}}]

    def open(self) -> None:
        pass

    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        self.prepared.extend(claims)
        return {c.ref.uid: PrepareResult() for c in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.unprepared.extend(claims)
        return {c.uid: "" for c in claims}

    def prepared_claims(self) -> list[ClaimRef]:
        return [c.ref for c in self.prepared]

    def close(self) -> None:
        self.closed += 1


class EchoDriver:
    name = "echo.example.com"

    def node(
        self,
        node_name: str,
        inventory: InventoryFile,
        *,
        dirs: NodeDirs,
        boot_id: str,
        get_claim: GetClaim,
        quiet: bool = False,
    ) -> NodePlugin:
        return EchoNode(node_name)


def echo_claim(ref: ClaimRef) -> dict[str, Any]:
    return claim_object(ref, result("echo-0", driver="echo.example.com", pool="n2"))


@pytest.mark.parametrize(
    ("release", "published"), [("25.12", ["t4-node"]), ("0.5.0", ["t4-node", "vr-node"])]
)
def test_a_rubin_node_publishes_nothing_on_a_release_whose_plugin_fails_on_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, release: str, published: list[str]
) -> None:
    entries = [
        {"name": "vr-node", "gpus": [{"profile": "vr200"}]},
        {"name": "t4-node", "gpus": [{"profile": "t4"}]},
    ]
    nodes = gpu_nodes(tmp_path, entries, release=release)  # a fleet: every node of one inventory
    nodes.on_list([node_obj("vr-node"), node_obj("t4-node")])
    assert sorted(n for n in nodes.names() if nodes.desired(n, SERVER)) == published
    failed = "node vr-node: error creating driver: " in caplog.text
    assert failed is (published == ["t4-node"])
    if failed:  # `serve` of that node fails at start with the same error (fakeplugin serve: error: ...)
        assert caplog.text.rstrip().endswith("error interpreting device architecture as string: 13")
        with pytest.raises(ValueError, match=r"for GPU 0: .* string: 13$"):
            nodes.add("vr-node")


def test_a_driver_of_our_own_runs_on_the_runtime_unchanged(tmp_path: Path) -> None:
    inventory = InventoryFile(write(tmp_path / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "t10"}]}]))
    driver = EchoDriver()
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    nodes = Nodes(
        inventory,
        lambda name: driver.node(name, inventory, dirs=dirs, boot_id=BOOT, get_claim=lambda ns, n: {}),
    )
    nodes.on_list([node_obj("n1"), node_obj("n2")])
    assert {n: (nodes.desired(n, SERVER) or [])[0]["spec"]["devices"] for n in nodes.names()} == {
        "n1": [{"name": "echo-0"}],
        "n2": [{"name": "echo-0"}],
    }
    plugin = nodes.get("n2")
    assert plugin is not None
    ref = prepare_ref(1)
    assert claims.prepare(plugin, [ref], lambda ns, n: echo_claim(ref)) == {ref.uid: PrepareResult()}
    assert plugin.prepared_claims() == [ref]
    shares = emulation(release="0.5.0-dev", feature_gates="ConsumableShares=true", consumable_shares="memory")
    assert shares.consumable_shares == "memory" != consumableshares.DISABLED
    assert "consumable shares: memory" in shares.describe()


# -- the runtime's claim checks (runtime.claims) ----------------------------------------------------------


class ApiClaims:
    """The API server's claims; every read recorded, with whether `lock` (a node lock file) was free."""

    def __init__(self, lock: Path, claims: dict[tuple[str, str], dict[str, Any]]) -> None:
        self._lock, self._claims = lock, claims
        self.reads: list[tuple[str, bool]] = []  # (name, the node lock was free)

    def __call__(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads.append((name, self._lock_free()))
        try:
            return self._claims[(namespace, name)]
        except KeyError:
            raise RuntimeError(f'resourceclaims.resource.k8s.io "{name}" not found') from None

    def _lock_free(self) -> bool:
        if not self._lock.exists():
            return True
        fd = os.open(self._lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: held by NodeLock ⇒ fails
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # releases ours


def refused_claims() -> tuple[list[ClaimRef], dict[tuple[str, str], dict[str, Any]], dict[str, str]]:
    """References (one of them hostile), the API server's claims, and the runtime's answer for each refused
    one; the last reference, `elsewhere`, passes the checks (allocated on another node)."""
    unallocated, replaced, missing, elsewhere = (prepare_ref(n) for n in (2, 3, 4, 5))
    hostile = ClaimRef("ns", "../../escaped", "claim-6")
    api = {
        ("ns", unallocated.name): claim_object(unallocated, allocated=False),
        ("ns", replaced.name): claim_object(prepare_ref(33), result("gpu-0")),
        ("ns", elsewhere.name): claim_object(elsewhere, result("gpu-0", pool="another-node")),
        ("ns", hostile.name): claim_object(hostile, result("gpu-0")),
    }
    refused = {
        unallocated.uid: "claim ns/claim-2 not allocated",
        replaced.uid: "claim ns/claim-3 got replaced",
        missing.uid: 'retrieve claim ns/claim-4: resourceclaims.resource.k8s.io "claim-4" not found',
        hostile.uid: f"invalid claim reference {str(hostile)!r}: uid '../../escaped' must be lowercase "
        "letters, digits and '-', at most 63 characters, starting and ending with a letter or digit",
    }
    return [unallocated, replaced, missing, hostile, elsewhere], api, refused


def test_the_runtime_reads_and_checks_each_claim_once_and_hands_the_driver_the_rest(tmp_path: Path) -> None:
    refs, objects, refused = refused_claims()
    api = ApiClaims(tmp_path / "pu.lock", objects)
    plugin = EchoNode("n2")

    results = CheckedClaims(plugin, api).prepare(refs)

    assert {uid: r.error for uid, r in results.items()} == {**refused, refs[-1].uid: ""}
    assert [name for name, _ in api.reads] == ["claim-2", "claim-3", "claim-4", "claim-5"]  # not the hostile
    assert plugin.prepared == [Claim(refs[-1], objects[("ns", "claim-5")])]  # the object read, as read
    assert CheckedClaims(plugin, api).unprepare(refs) == dict.fromkeys((r.uid for r in refs), "")
    assert plugin.unprepared == [r for r in refs if r.name != "claim-6"]  # the hostile one: nothing to undo
    assert len(api.reads) == 4  # Unprepare reads no claim for the runtime


def gpu_node(tmp_path: Path, get_claim: GetClaim) -> NodePlugin:
    inventory = InventoryFile(write(tmp_path / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "t10"}]}]))
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    return GpuDriver(emulation(release="")).node(
        "n1", inventory, dirs=dirs, boot_id=BOOT, get_claim=get_claim
    )


def compute_domain_node(tmp_path: Path, get_claim: GetClaim) -> NodePlugin:
    inv = write(tmp_path / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "gb200", "count": 4}]}])
    driver = ComputeDomainDriver(emulation(release="", driver_name=CD_DRIVER), Api(), retry_seconds=0)
    dirs = NodeDirs(cdi_root=tmp_path / "cdi", plugin_dir=tmp_path / "plugin")
    return driver.node("n1", InventoryFile(inv), dirs=dirs, boot_id=BOOT, get_claim=get_claim)


@pytest.mark.parametrize("make", [gpu_node, compute_domain_node], ids=["gpu", "compute-domain"])
def test_both_drivers_get_each_claim_read_once_before_their_node_lock(tmp_path: Path, make: Any) -> None:
    refs, objects, refused = refused_claims()
    api = ApiClaims(tmp_path / "plugin" / "pu.lock", objects)
    plugin = make(tmp_path, api)
    plugin.set_node(node_obj("n1"))
    plugin.open()  # the lock file exists: a read under the lock would be seen
    assert (tmp_path / "plugin" / "pu.lock").exists()

    results = CheckedClaims(plugin, api).prepare(refs)

    assert results == {
        **{uid: PrepareResult(error=e) for uid, e in refused.items()},
        refs[-1].uid: PrepareResult(),
    }
    assert api.reads == [(name, True) for name in ("claim-2", "claim-3", "claim-4", "claim-5")]
    assert plugin.prepared_claims() == []


def test_hosts_ask_a_node_for_its_optional_capabilities_not_its_driver(tmp_path: Path) -> None:
    """runtime.driver's optional capabilities: the GPU driver's nodes have device health and device states
    (serve --device-health, telemetry); ComputeDomain nodes have neither, as a driver's echo has not."""
    for sub in ("gpu", "cd"):
        (tmp_path / sub).mkdir()
    gpu = gpu_node(tmp_path / "gpu", lambda ns, name: {})
    assert isinstance(gpu, DeviceHealth) and isinstance(gpu, DeviceStates)
    assert gpu.health_state("gpu-0") == ("gpu", None) and gpu.health_state("gone") is None
    for other in (compute_domain_node(tmp_path / "cd", lambda ns, name: {}), EchoNode("n1")):
        assert not isinstance(other, DeviceHealth) and not isinstance(other, DeviceStates)


def test_a_host_closes_every_plugin_it_made(tmp_path: Path) -> None:
    inventory = InventoryFile(write(tmp_path / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "t10"}]}]))
    made: list[EchoNode] = []

    def make(name: str) -> NodePlugin:
        made.append(EchoNode(name))
        return made[-1]

    nodes = Nodes(inventory, make)
    nodes.on_list([node_obj("n1"), node_obj("n2")])
    nodes.on_event("DELETED", node_obj("n2"))  # dropped, its plugin kept: closed too
    nodes.close()
    assert [(p.node_name, p.closed) for p in made] == [("n1", 1), ("n2", 1)]


def test_the_boot_id_file_is_read_and_named_when_unusable(tmp_path: Path) -> None:
    path = tmp_path / "boot_id"
    path.write_text(BOOT + "\n")
    assert bootid.read_boot_id(path) == BOOT
    path.write_text("\n")
    with pytest.raises(bootid.BootIdError, match=f"boot ID file {path} is empty"):
        bootid.read_boot_id(path)
    with pytest.raises(bootid.BootIdError, match="cannot read the boot ID from"):
        bootid.read_boot_id(tmp_path / "missing")
