"""gRPC fuzzing of the real plugin: Server + Preparer on real files, claims from JSON (tests.harness.plugin).

Seeded random and malformed requests on real unix sockets: raw bytes that are not protobuf on every method,
unknown methods, claims with huge, empty, unicode or path-traversal fields, 10 000-claim lists, messages over
gRPC's size limit, and claims whose (fake) API objects are malformed. Every call must get an answer or a gRPC
error status; afterwards the plugin still answers GetInfo and prepares a valid claim correctly, its
checkpoint loads, and no file exists outside its directories or under a name a hostile field chose.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakeplugin import cdi
from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin._proto.dra.v1 import api_pb2_grpc as v1_grpc
from fakeplugin._proto.dra.v1beta1 import api_pb2 as v1beta1
from fakeplugin._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.model import ClaimRef
from fakeplugin.server import Server
from tests.harness import plugin as h

RPC_TIMEOUT_S = 30
MAX_MESSAGE = 4 * 1024 * 1024  # gRPC's default receive limit, the server's too
WIRE = {"v1": (v1, v1_grpc), "v1beta1": (v1beta1, v1beta1_grpc)}
DRA_METHODS = [
    f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/{method}"
    for version in WIRE
    for method in ("NodePrepareResources", "NodeUnprepareResources")
]
REG_METHODS = [
    "/pluginregistration.Registration/GetInfo",
    "/pluginregistration.Registration/NotifyRegistrationStatus",
]
MARKER = "fuzz-escape-marker"  # the name every path-traversal field tries to create
HOSTILE_TEXT = [
    "", " ", "a" * 64, "a" * 100_000, "UPPER", "-lead", "trail-", "a.b", "a_b", "é", "你好", "😀", "\u202e",
    "\x00", "a\x00b", "\n", "..", ".", "/", f"../../{MARKER}", f"../../../../../../tmp/{MARKER}",
    f"..%2f{MARKER}", f"{MARKER}/../..", "*", "~", "$(touch x)", "a" * 63, "a" * 254,
]  # fmt: skip


class Plugin:
    """The real server and Preparer, serving in its worker threads; the test thread is the kubelet."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = Server(h.core(root), h.settings(root))
        self.server.start()
        self.dra_channel = grpc.insecure_channel(f"unix:{self.server.paths.dra}")
        self.reg_channel = grpc.insecure_channel(f"unix:{self.server.paths.registration}")

    def dra(self, version: str) -> Any:
        return WIRE[version][1].DRAPluginStub(self.dra_channel)

    def raw(self, channel: grpc.Channel, method: str, payload: bytes) -> bytes | grpc.StatusCode:
        """Send `payload` unserialised; the answer's bytes, or the error status."""
        try:
            return channel.unary_unary(method)(payload, timeout=RPC_TIMEOUT_S)
        except grpc.RpcError as e:
            assert e.code() != grpc.StatusCode.DEADLINE_EXCEEDED, f"{method}: no answer"
            return e.code()

    def close(self) -> None:
        self.dra_channel.close()
        self.reg_channel.close()
        self.server.stop()


@pytest.fixture
def sandbox() -> Iterator[Path]:
    # Short (unix socket paths) and nested, so that even a traversal that escaped the plugin's
    # directories would land in here, where the test looks.
    top = Path(tempfile.mkdtemp(prefix="fpfz-", dir="/tmp"))
    root = top / "a" / "b"
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def plugin(sandbox: Path) -> Iterator[Plugin]:
    running = Plugin(sandbox)
    yield running
    running.close()


def uid(n: int) -> str:
    return f"{n:08x}-fuzz-4bbb-8ccc-dddddddddddd"


def valid_claim(n: int, *devices: str) -> ClaimRef:
    return ClaimRef(namespace="ns", uid=uid(n), name=f"claim-{n}")


def prepare_valid(plugin: Plugin, version: str, ref: ClaimRef, devices: list[str]) -> Any:
    h.write_claim(plugin.root, ref, h.claim_object(ref, devices))
    api = WIRE[version][0]
    request = api.NodePrepareResourcesRequest(
        claims=[api.Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)]
    )
    return plugin.dra(version).NodePrepareResources(request, timeout=RPC_TIMEOUT_S).claims[ref.uid]


def check_still_serving(plugin: Plugin, n: int = 999_999) -> None:
    """GetInfo answers, a valid claim prepares to the right CDI devices, the checkpoint loads."""
    info = reg_grpc.RegistrationStub(plugin.reg_channel).GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert (info.name, info.endpoint) == (h.DRIVER, str(plugin.server.paths.dra))
    ref = valid_claim(n)
    claim = WIRE["v1"][0].Claim(namespace=ref.namespace, uid=ref.uid, name=ref.name)
    plugin.dra("v1").NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=[claim]), timeout=30)
    free = sorted(set(h.devices()) - taken_devices(plugin))
    assert free, "the fuzzing left every device prepared"
    answer = prepare_valid(plugin, "v1", ref, [free[0]])
    assert answer.error == ""
    assert [list(d.cdi_device_ids) for d in answer.devices] == [
        [cdi.cdi_device_id(ref.uid, free[0], driver_name=h.DRIVER)]
    ]
    assert cdi.spec_path(h.cdi_root(plugin.root), ref.uid, driver_name=h.DRIVER).is_file()
    response = plugin.dra("v1").NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[claim]), timeout=RPC_TIMEOUT_S
    )
    assert response.claims[ref.uid].error == ""
    check_files(plugin)


def taken_devices(plugin: Plugin) -> set[str]:
    checkpoint = cp.load(h.plugin_dir(plugin.root) / cp.FILE_NAME, boot_id=h.BOOT_ID)
    return {d.device_name for entry in checkpoint.claims.values() for d in entry.devices}


def check_files(plugin: Plugin) -> None:
    """Only the plugin's own files, only where they belong; the checkpoint loads; no traversal marker."""
    root = plugin.root
    checkpoint = cp.load(h.plugin_dir(root) / cp.FILE_NAME, boot_id=h.BOOT_ID)
    specs = {cdi.spec_path(h.cdi_root(root), u, driver_name=h.DRIVER).name for u in checkpoint.claims}
    top = root.parent.parent
    for path in top.rglob("*"):
        if path.is_relative_to(h.claims_dir(root)):
            continue  # the fake API server's objects, named by the test
        assert MARKER not in str(path), path
        rel = path.relative_to(root) if path.is_relative_to(root) else None
        assert rel is not None or path in (root.parent,), f"unexpected {path}"
        if path.is_dir() or rel is None:
            continue
        first = rel.parts[0]
        if first == "cdi":
            assert rel.name in specs, f"CDI spec of no checkpointed claim: {path}"
        elif first == "plugins":
            assert rel.parts[1] == h.DRIVER, path
        else:
            assert first in ("registry", "boot_id"), path


# -- the fuzzing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_raw_bytes_and_unknown_methods_get_an_answer_or_a_status(plugin: Plugin, seed: int) -> None:
    rng = random.Random(seed)
    statuses: set[grpc.StatusCode] = set()
    for _ in range(60):
        method = rng.choice(
            [*DRA_METHODS, *REG_METHODS, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/Nope", "/x/y", "/",
             "/v1alpha1.DRAResourceHealth/NodeWatchResources", "/" + rng.randbytes(8).hex()]
        )  # fmt: skip
        roll = rng.random()
        if roll < 0.4:
            payload = rng.randbytes(rng.randint(0, 2000))
        elif roll < 0.7:  # field 1 (claims) with a random or lying length
            body = rng.randbytes(rng.randint(0, 200))
            payload = b"\x0a" + bytes([rng.choice([len(body), 0x7F, 0xFF])]) + body
        else:  # a valid request, then garbage
            claim = v1.Claim(namespace="ns", uid=uid(rng.randint(0, 50)), name="c")
            payload = v1.NodePrepareResourcesRequest(claims=[claim]).SerializeToString() + rng.randbytes(5)
        answer = plugin.raw(plugin.dra_channel if rng.random() < 0.7 else plugin.reg_channel, method, payload)
        if isinstance(answer, grpc.StatusCode):
            statuses.add(answer)
    assert grpc.StatusCode.UNIMPLEMENTED in statuses  # unknown methods are refused, not hung
    check_still_serving(plugin)


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_hostile_claim_fields_are_answered_per_claim(plugin: Plugin, version: str) -> None:
    api = WIRE[version][0]
    rng = random.Random(version)
    claims = []
    for text in HOSTILE_TEXT:
        field = rng.choice(["uid", "namespace", "name"])
        parts = {"namespace": "ns", "uid": uid(len(claims)), "name": f"c{len(claims)}", field: text}
        claims.append(api.Claim(**parts))
        # The "API server" even knows some of them, allocated to a real device.
        file_name = parts["namespace"] + parts["name"]
        if all(parts.values()) and len(file_name) < 200 and "/" not in file_name and "\x00" not in file_name:
            ref = ClaimRef(**parts)
            h.write_claim(plugin.root, ref, h.claim_object(ref, [rng.choice(list(h.devices()))]))
    stub = plugin.dra(version)
    prepared = stub.NodePrepareResources(
        api.NodePrepareResourcesRequest(claims=claims), timeout=RPC_TIMEOUT_S
    )
    assert set(prepared.claims) == {c.uid for c in claims}
    for c in claims:
        if c.uid in HOSTILE_TEXT and c.uid != "a" * 63:  # a hostile UID can never be prepared
            assert prepared.claims[c.uid].error, c.uid
    unprepared = stub.NodeUnprepareResources(api.NodeUnprepareResourcesRequest(claims=claims), timeout=30)
    assert set(unprepared.claims) == {c.uid for c in claims}
    check_still_serving(plugin)
    assert cp.load(h.plugin_dir(plugin.root) / cp.FILE_NAME, boot_id=h.BOOT_ID).claims == {}


def test_malformed_claim_objects_fail_their_claim_only(plugin: Plugin) -> None:
    rng = random.Random(7)
    good = valid_claim(1)
    h.write_claim(plugin.root, good, h.claim_object(good, ["gpu-0"]))
    # (status or whole-object change, whether the claim fails: an empty result list is nothing of ours)
    shapes: list[tuple[Any, bool]] = [
        (None, True), ([], True), ("x", True), (1, True), ({"status": None}, True),
        ({"status": {"allocation": []}}, True), ({"metadata": "x"}, True), ({"metadata": {"uid": 5}}, True),
        ({"status": {"allocation": {"devices": {"results": [None, 1, "x"]}}}}, True),
        ({"status": {"allocation": {"devices": {"results": [{"driver": h.DRIVER, "pool": h.NODE}]}}}}, True),
        ({"status": {"allocation": {"devices": []}}}, False),
        ({"status": {"allocation": {"devices": {"results": {}}}}}, False),
    ]  # fmt: skip
    refs = [good]
    fails = {}
    for i, (shape, fail) in enumerate(shapes, start=2):
        ref = valid_claim(i)
        obj = h.claim_object(ref, ["gpu-1"])
        if isinstance(shape, dict):
            obj.update(shape)
        else:
            obj["status"] = shape
        h.write_claim(plugin.root, ref, obj)
        refs.append(ref)
        fails[ref.uid] = fail
    for i in range(len(refs) + 1, len(refs) + 20):  # results with hostile device names
        ref = valid_claim(i)
        obj = h.claim_object(ref, [rng.choice(HOSTILE_TEXT[:-2]) or "x", "gpu-2"])
        h.write_claim(plugin.root, ref, obj)
        refs.append(ref)
        fails[ref.uid] = True
    claims = [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]
    got = plugin.dra("v1").NodePrepareResources(v1.NodePrepareResourcesRequest(claims=claims), timeout=30)
    assert got.claims[good.uid].error == "" and [d.device_name for d in got.claims[good.uid].devices] == [
        "gpu-0"
    ]
    for ref in refs[1:]:
        answer = got.claims[ref.uid]
        assert bool(answer.error) == fails[ref.uid] and not answer.devices, (ref, answer)
    check_still_serving(plugin)


@pytest.mark.parametrize("operation", ["prepare", "unprepare"])
def test_ten_thousand_claims_in_one_request(plugin: Plugin, operation: str) -> None:
    claims = [v1.Claim(namespace="ns", uid=uid(i), name=f"c{i}") for i in range(10_000)]
    stub = plugin.dra("v1")
    if operation == "prepare":
        response = stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=claims), timeout=120)
        assert all("not found" in r.error for r in response.claims.values())
    else:
        response = stub.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=claims), timeout=120)
        assert all(r.error == "" for r in response.claims.values())
    assert len(response.claims) == 10_000
    check_still_serving(plugin)


def test_messages_over_the_size_limit_are_refused(plugin: Plugin) -> None:
    big = v1.NodePrepareResourcesRequest(
        claims=[v1.Claim(namespace="ns", uid="u", name="n" * (MAX_MESSAGE + 1))]
    )
    with pytest.raises(grpc.RpcError) as refused:
        plugin.dra("v1").NodePrepareResources(big, timeout=RPC_TIMEOUT_S)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    for method in [*DRA_METHODS, *REG_METHODS]:
        assert plugin.raw(plugin.dra_channel, method, b"\x00" * (MAX_MESSAGE + 10)) in (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            grpc.StatusCode.UNIMPLEMENTED,  # a registration method on the DRA socket
        )
    check_still_serving(plugin)


def test_concurrent_random_traffic_keeps_the_plugin_consistent(plugin: Plugin) -> None:
    """Threads mixing valid prepares/unprepares with garbage; then every claim unprepares cleanly."""
    errors: list[BaseException] = []
    refs = [valid_claim(i) for i in range(12)]
    devices = sorted(h.devices())
    for i, ref in enumerate(refs):
        h.write_claim(plugin.root, ref, h.claim_object(ref, [devices[i % len(devices)]]))

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                version = rng.choice(list(WIRE))
                api = WIRE[version][0]
                some = rng.sample(refs, rng.randint(1, 4))
                claims = [api.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in some]
                roll = rng.random()
                if roll < 0.45:
                    got = plugin.dra(version).NodePrepareResources(
                        api.NodePrepareResourcesRequest(claims=claims), timeout=RPC_TIMEOUT_S
                    )
                    assert set(got.claims) == {r.uid for r in some}
                    for r in some:
                        answer = got.claims[r.uid]
                        if not answer.error:  # the only acceptable errors: the device is taken
                            assert [list(d.cdi_device_ids) for d in answer.devices] == [
                                [cdi.cdi_device_id(r.uid, d.device_name, driver_name=h.DRIVER)]
                                for d in answer.devices
                            ]
                        else:
                            assert "already allocated to different claim" in answer.error, answer.error
                elif roll < 0.9:
                    got = plugin.dra(version).NodeUnprepareResources(
                        api.NodeUnprepareResourcesRequest(claims=claims), timeout=RPC_TIMEOUT_S
                    )
                    assert all(got.claims[r.uid].error == "" for r in some)
                else:
                    plugin.raw(
                        plugin.dra_channel, rng.choice(DRA_METHODS), rng.randbytes(rng.randint(1, 300))
                    )
        except BaseException as e:  # reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    check_files(plugin)
    claims = [v1.Claim(namespace=r.namespace, uid=r.uid, name=r.name) for r in refs]
    got = plugin.dra("v1").NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=claims), timeout=30)
    assert all(r.error == "" for r in got.claims.values())
    assert not list(h.cdi_root(plugin.root).iterdir())
    check_still_serving(plugin)
