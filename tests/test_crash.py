"""kill -9 crash consistency: the real plugin process (tests.harness.plugin: the product's Preparer and gRPC
server on real files) under concurrent Prepare/Unprepare, SIGKILLed at seeded random moments and restarted.

After every restart: the checkpoint loads; no temp file of ours is left; every CDI spec belongs to a claim the
checkpoint holds; every claim there either prepares again with the same CDI device IDs or unprepares
cleanly. At the end, unpreparing everything leaves no spec, no nvidia-smi data and an empty checkpoint.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import yaml

from fakeplugin import cdi
from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin._proto.dra.v1 import api_pb2_grpc as v1_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.atomicfile import temp_target
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.model import ClaimRef, ClaimState
from tests.harness import plugin as h

ROOT = Path(__file__).resolve().parent.parent
SEED = 20240611
KILLS = 10
RUN_S = (0.05, 1.2)  # how long the plugin serves before each kill, drawn per kill
CLIENTS = 3
START_TIMEOUT_S = 30
RPC_TIMEOUT_S = 10
# Claim → its devices: distinct, so every Prepare that gets an answer must succeed.
ALLOCATIONS = [["gpu-0"], ["gpu-1"], ["gpu-2"], ["gpu-3"], ["gpu-4", "gpu-5"], ["gpu-6", "gpu-7"]]
CLAIMS = [
    ClaimRef(namespace="ns", uid=f"{i:08x}-c0de-4bbb-8ccc-dddddddddddd", name=f"c{i}") for i in range(6)
]
DEVICES = {ref.uid: devices for ref, devices in zip(CLAIMS, ALLOCATIONS, strict=True)}


def expected_ids(uid: str) -> list[list[str]]:
    return [[cdi.cdi_device_id(uid, d, driver_name=h.DRIVER)] for d in DEVICES[uid]]


def wire(refs: list[ClaimRef]) -> list[v1.Claim]:
    return [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]


class PluginProcess:
    """One run of the plugin process; `kill()` is SIGKILL, nothing graceful."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.log = open(root / "plugin.log", "ab")  # noqa: SIM115  (closed in kill)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.harness.plugin", str(root)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        paths = h.settings(root)
        self.dra_socket = paths.plugins_dir / h.DRIVER / "dra.sock"
        registration = paths.registrar_dir / f"{h.DRIVER}-reg.sock"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not registration.exists():
            assert self.proc.poll() is None, f"plugin exited with {self.proc.returncode}: see {self.log.name}"
            assert time.monotonic() < deadline, "plugin did not start"
            time.sleep(0.02)
        with grpc.insecure_channel(f"unix:{registration}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(
                reg.InfoRequest(), timeout=START_TIMEOUT_S, wait_for_ready=True
            )
        assert info.endpoint == str(self.dra_socket)
        self.channel = grpc.insecure_channel(f"unix:{self.dra_socket}")
        self.stub = v1_grpc.DRAPluginStub(self.channel)

    def prepare(self, refs: list[ClaimRef]) -> v1.NodePrepareResourcesResponse:
        request = v1.NodePrepareResourcesRequest(claims=wire(refs))
        return self.stub.NodePrepareResources(request, timeout=RPC_TIMEOUT_S)

    def unprepare(self, refs: list[ClaimRef]) -> v1.NodeUnprepareResourcesResponse:
        request = v1.NodeUnprepareResourcesRequest(claims=wire(refs))
        return self.stub.NodeUnprepareResources(request, timeout=RPC_TIMEOUT_S)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.channel.close()
        self.log.close()


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fpcr-", dir="/tmp"))  # short: unix socket paths
    for ref in CLAIMS:
        h.write_claim(path, ref, h.claim_object(ref, DEVICES[ref.uid]))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def our_temp_files(root: Path) -> list[Path]:
    dirs = [h.cdi_root(root), h.plugin_dir(root), smi.script_path(h.plugin_dir(root)).parent]
    data_root = h.plugin_dir(root) / "smi"
    dirs += [p for p in data_root.iterdir() if p.is_dir()] if data_root.is_dir() else []
    return [p for d in dirs if d.is_dir() for p in d.iterdir() if temp_target(p.name) is not None]


def load_checkpoint(root: Path) -> cp.Checkpoint:
    path = h.plugin_dir(root) / cp.FILE_NAME
    if not path.exists():
        return cp.Checkpoint(node_boot_id=h.BOOT_ID)
    return cp.load(path, boot_id=h.BOOT_ID)  # raises on any corruption


def spec_uids(root: Path) -> set[str]:
    prefix = f"{cdi.vendor(h.DRIVER)}-{cdi.CLAIM_CLASS}_"
    return {p.name[len(prefix) : -len(".yaml")] for p in h.cdi_root(root).glob(f"{prefix}*.yaml")}


def spec_devices(root: Path, uid: str) -> list[str]:
    spec = yaml.safe_load(cdi.spec_path(h.cdi_root(root), uid, driver_name=h.DRIVER).read_text())
    return [d["name"] for d in spec["devices"]]


def check_after_restart(plugin: PluginProcess, rng: random.Random) -> None:
    """Check the state a kill left, as the restarted plugin sees it; then settle every claim, either way."""
    root = plugin.root
    assert our_temp_files(root) == []
    checkpoint = load_checkpoint(root)
    assert spec_uids(root) <= set(checkpoint.claims), "a CDI spec of a claim the checkpoint does not hold"
    for uid, entry in checkpoint.claims.items():
        assert [list(d.cdi_device_ids) for d in entry.devices] == expected_ids(uid)
        # A spec is complete or absent, never partial. PrepareCompleted without a spec is what a kill in
        # the middle of Unprepare leaves (spec removed, entry not yet); Prepare writes it again (below).
        if entry.state is ClaimState.PREPARE_COMPLETED and uid in spec_uids(root):
            assert spec_devices(root, uid) == [f"{uid}-{d}" for d in DEVICES[uid]]
    for uid in sorted(checkpoint.claims):
        ref = next(r for r in CLAIMS if r.uid == uid)
        if rng.random() < 0.5:
            answer = plugin.prepare([ref]).claims[uid]
            assert answer.error == ""
            assert [list(d.cdi_device_ids) for d in answer.devices] == expected_ids(uid)
            assert load_checkpoint(root).claims[uid].state is ClaimState.PREPARE_COMPLETED
            assert spec_devices(root, uid) == [f"{uid}-{d}" for d in DEVICES[uid]]
        else:
            assert plugin.unprepare([ref]).claims[uid].error == ""
            assert uid not in load_checkpoint(root).claims and uid not in spec_uids(root)


def traffic(
    plugin: PluginProcess, seed: int, stop: threading.Event, failures: list[str], answered: list[int]
) -> None:
    """Random Prepare/Unprepare until the plugin dies; every answer it gives must be right."""
    rng = random.Random(seed)
    while not stop.is_set():
        refs = rng.sample(CLAIMS, rng.randint(1, 3))
        try:
            if rng.random() < 0.55:
                got = plugin.prepare(refs).claims
                for r in refs:
                    if got[r.uid].error or [
                        list(d.cdi_device_ids) for d in got[r.uid].devices
                    ] != expected_ids(r.uid):
                        failures.append(f"prepare {r.uid}: {got[r.uid]}")
            else:
                got_errors = plugin.unprepare(refs).claims
                failures += [
                    f"unprepare {r.uid}: {got_errors[r.uid].error}" for r in refs if got_errors[r.uid].error
                ]
        except grpc.RpcError:  # killed under the call
            return
        except ValueError as e:  # the channel was closed after the kill, before this call started
            assert "closed channel" in str(e), e
            return
        answered.append(len(refs))


def test_kill_9_at_random_moments_never_corrupts_or_strands_a_claim(root: Path) -> None:
    rng = random.Random(SEED)
    failures: list[str] = []
    answered: list[int] = []
    temp_files_seen = 0
    plugin = PluginProcess(root)
    for kill in range(KILLS):
        stop = threading.Event()
        clients = [
            threading.Thread(
                target=traffic, args=(plugin, SEED + kill * CLIENTS + i, stop, failures, answered)
            )
            for i in range(CLIENTS)
        ]
        for client in clients:
            client.start()
        time.sleep(rng.uniform(*RUN_S))
        plugin.kill()
        stop.set()
        for client in clients:
            client.join(timeout=RPC_TIMEOUT_S * 2)
        assert not failures, failures
        temp_files_seen += len(our_temp_files(root))
        load_checkpoint(root)  # what the kill left loads, before any restart repairs anything
        plugin = PluginProcess(root)
        check_after_restart(plugin, rng)
    try:
        assert all(a.error == "" for a in plugin.unprepare(CLAIMS).claims.values())
        assert load_checkpoint(root).claims == {}
        assert spec_uids(root) == set() and list(h.cdi_root(root).iterdir()) == []
        data_root = h.plugin_dir(root) / "smi"
        assert not data_root.exists() or list(data_root.iterdir()) == []
        assert our_temp_files(root) == []
    finally:
        plugin.kill()
    print(f"{KILLS} kills, {len(answered)} calls answered ({sum(answered)} claims) between them; "
          f"{temp_files_seen} temp files of killed writes found, all removed at restart")  # fmt: skip
    assert len(answered) >= KILLS  # the kills did land among real traffic
