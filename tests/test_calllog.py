"""The call log: what a real server over real unix sockets writes for each kubelet call, its rotation
bound, torn lines, the reader's filters, and `fakeplugin calls --file`."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin._proto.dra.v1beta1 import api_pb2 as v1beta1
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin.cli import main
from fakeplugin.model import PrepareResult
from fakeplugin.server.calllog import read_calls, rotated
from fakeplugin.server.registration import RegistrationServicer
from tests.harness import DRIVER
from tests.harness.kube import wait_for
from tests.harness.server import GPU0, RPC_TIMEOUT_S, CannedDriver, Running
from tests.harness.server import claim as wire_claim

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def calls_file(short_dir: Path) -> Path:
    return short_dir / "plugins" / DRIVER / "calls.jsonl"


def prepare(running: Running, api: Any, *claims: Any) -> None:
    stub = running.dra("v1" if api is v1 else "v1beta1")
    stub.NodePrepareResources(api.NodePrepareResourcesRequest(claims=list(claims)), timeout=RPC_TIMEOUT_S)


def test_every_kubelet_call_is_one_record_beside_the_checkpoint(serve: Any, short_dir: Path) -> None:
    driver = CannedDriver(
        {"uid-a": PrepareResult(devices=(GPU0,)), "uid-b": PrepareResult(error="no GPU left")},
        unprepared={"uid-a": ""},
    )
    running = serve(driver)
    registration = running.registration()
    registration.GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    registration.NotifyRegistrationStatus(
        reg.RegistrationStatus(plugin_registered=True), timeout=RPC_TIMEOUT_S
    )
    with pytest.raises(grpc.RpcError):
        registration.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="endpoint taken"), timeout=RPC_TIMEOUT_S
        )
    prepare(running, v1, wire_claim(v1, "uid-a", "team", "a"), wire_claim(v1, "uid-b", "team", "b"))
    running.dra("v1beta1").NodeUnprepareResources(
        v1beta1.NodeUnprepareResourcesRequest(claims=[wire_claim(v1beta1, "uid-a", "team", "a")]),
        timeout=RPC_TIMEOUT_S,
    )

    records = read_calls(calls_file(short_dir))
    for record in records:
        assert TIME.match(record.pop("time")), record
        assert record.pop("durationMs") >= 0
    assert records == [
        {"method": "GetInfo", "service": "pluginregistration.Registration", "result": "ok"},
        {
            "method": "NotifyRegistrationStatus",
            "service": "pluginregistration.Registration",
            "registered": True,
            "result": "ok",
        },
        {
            "method": "NotifyRegistrationStatus",
            "service": "pluginregistration.Registration",
            "registered": False,
            "result": "error",
            "error": "UNKNOWN: failed registration process: endpoint taken",
        },
        {
            "method": "NodePrepareResources",
            "service": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
            "claims": ["team/a:uid-a", "team/b:uid-b"],
            "result": "error",
            "error": {"uid-b": "no GPU left"},
        },
        {
            "method": "NodeUnprepareResources",
            "service": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
            "claims": ["team/a:uid-a"],
            "result": "ok",
        },
    ]


def test_a_failed_registration_is_logged_before_the_kubelet_sees_the_error(
    serve: Any, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever runs once the handler returned (gRPC sending the status) is held until the test has read
    # the log: a record written only after the answer left (the race) cannot be there in time.
    held = threading.Event()
    notify = RegistrationServicer.NotifyRegistrationStatus

    def holding(self: RegistrationServicer, request: Any, context: grpc.ServicerContext) -> Any:
        context.add_callback(lambda: held.wait(RPC_TIMEOUT_S))  # runs when the call ends
        return notify(self, request, context)

    monkeypatch.setattr(RegistrationServicer, "NotifyRegistrationStatus", holding)
    running = serve()
    try:
        with pytest.raises(grpc.RpcError) as failed:
            running.registration().NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="endpoint taken"), timeout=RPC_TIMEOUT_S
            )
        records = read_calls(calls_file(short_dir))
    finally:
        held.set()
    assert (failed.value.code(), failed.value.details()) == (
        grpc.StatusCode.UNKNOWN,
        "failed registration process: endpoint taken",
    )
    assert [(r["method"], r["registered"], r["result"], r["error"]) for r in records] == [
        (
            "NotifyRegistrationStatus",
            False,
            "error",
            "UNKNOWN: failed registration process: endpoint taken",
        )
    ]


def test_reader_filters_by_claim_and_method(serve: Any, short_dir: Path) -> None:
    running = serve(CannedDriver({"uid-a": PrepareResult(devices=(GPU0,))}, unprepared={"uid-a": ""}))
    prepare(running, v1, wire_claim(v1, "uid-a", "team", "a"))
    prepare(running, v1beta1, wire_claim(v1beta1, "uid-b", "team", "b"))
    running.dra("v1").NodeUnprepareResources(
        v1.NodeUnprepareResourcesRequest(claims=[wire_claim(v1, "uid-a", "team", "a")]), timeout=RPC_TIMEOUT_S
    )
    path = calls_file(short_dir)

    def summary(records: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
        return [(r["method"], r["claims"]) for r in records]

    assert summary(read_calls(path, claim="team/a")) == [
        ("NodePrepareResources", ["team/a:uid-a"]),
        ("NodeUnprepareResources", ["team/a:uid-a"]),
    ]
    assert summary(read_calls(path, claim="uid-b")) == [("NodePrepareResources", ["team/b:uid-b"])]
    assert summary(read_calls(path, claim="team/a", method="NodeUnprepareResources")) == [
        ("NodeUnprepareResources", ["team/a:uid-a"])
    ]
    assert read_calls(path, claim="team/nope") == []
    assert read_calls(path, claim="team") == []  # a namespace alone names no claim
    assert read_calls(short_dir / "missing.jsonl") == []


def test_rotation_keeps_one_old_generation_within_the_bound(serve: Any, short_dir: Path) -> None:
    limit = 2000
    running = serve(CannedDriver(), call_log_max_bytes=limit)
    for i in range(60):
        prepare(running, v1, wire_claim(v1, f"uid-{i:02}", "team", f"c{i:02}"))
    path = calls_file(short_dir)
    line = max(len(raw) for p in (path, rotated(path)) for raw in p.read_bytes().splitlines(keepends=True))
    assert path.stat().st_size <= limit + line
    assert limit < rotated(path).stat().st_size <= limit + line
    assert sorted(p.name for p in path.parent.glob("calls.jsonl*")) == ["calls.jsonl", "calls.jsonl.1"]

    claims = [r["claims"][0] for r in read_calls(path)]
    assert claims[-1] == "team/c59:uid-59", "the newest call is last"
    assert claims == sorted(claims), "both generations, oldest first, none twice"
    assert len(claims) == len(path.read_bytes().splitlines()) + len(rotated(path).read_bytes().splitlines())


def test_a_torn_last_line_is_ignored_and_ended_by_the_next_writer(serve: Any, short_dir: Path) -> None:
    running = serve(CannedDriver())
    prepare(running, v1, wire_claim(v1, "uid-1", "team", "one"))
    running.server.stop()
    path = calls_file(short_dir)
    with path.open("ab") as f:  # a writer killed in the middle of a record
        f.write(b'{"time":"2026-01-01T00:00:00.000Z","method":"NodePrepa')
    assert [r["claims"] for r in read_calls(path)] == [["team/one:uid-1"]]

    running = serve(CannedDriver())  # the plugin again, on the same call log
    prepare(running, v1, wire_claim(v1, "uid-2", "team", "two"))
    assert [r["claims"] for r in read_calls(path)] == [["team/one:uid-1"], ["team/two:uid-2"]]
    assert path.read_bytes().splitlines()[1].endswith(b'"method":"NodePrepa'), "the torn line, ended"


def test_a_health_watch_is_logged_when_it_ends(serve: Any, short_dir: Path) -> None:
    from fakeplugin._proto.dra_health.v1alpha1 import api_pb2 as dh
    from fakeplugin._proto.dra_health.v1alpha1 import api_pb2_grpc as dh_grpc

    running = serve(
        device_health=True,
        device_health_pool="node1",
        device_health_devices=("gpu-0",),
        device_health_interval_s=0.05,
        device_health_of=lambda name: ("gpu", None),
    )
    stream = dh_grpc.DRAResourceHealthStub(running.channel(running.server.paths.dra)).NodeWatchResources(
        dh.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S * 3
    )
    next(stream), next(stream)
    assert read_calls(calls_file(short_dir)) == [], "a watch is written when it ends"
    running.server.stop()
    list(stream)
    (record,) = read_calls(calls_file(short_dir))
    assert (record["method"], record["service"], record["result"]) == (
        "NodeWatchResources",
        "v1alpha1.DRAResourceHealth",
        "ok",
    )
    assert record["responses"] >= 2


def test_a_health_watch_the_kubelet_dropped_is_logged_cancelled_and_frees_its_thread(
    serve: Any, short_dir: Path
) -> None:
    from fakeplugin._proto.dra_health.v1alpha1 import api_pb2 as dh
    from fakeplugin._proto.dra_health.v1alpha1 import api_pb2_grpc as dh_grpc

    running = serve(
        device_health=True,
        device_health_pool="node1",
        device_health_devices=("gpu-0",),
        device_health_interval_s=3600,  # the thread must not wait for the next report to notice
        device_health_of=lambda name: ("gpu", None),
    )
    stub = dh_grpc.DRAResourceHealthStub(running.channel(running.server.paths.dra))
    stream = stub.NodeWatchResources(dh.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S * 3)
    next(stream)
    stream.cancel()
    (record,) = wait_for(lambda: read_calls(calls_file(short_dir)), what="the watch's record", timeout=30)
    assert (record["method"], record["result"], record["responses"]) == ("NodeWatchResources", "error", 1)
    assert record["error"].startswith("CANCELLED: ")


def test_calls_command_reads_a_file_as_table_and_json(
    serve: Any, short_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    running = serve(CannedDriver({"uid-b": PrepareResult(error="no GPU left")}))
    prepare(running, v1, wire_claim(v1, "uid-a", "team", "a"))
    prepare(running, v1, wire_claim(v1, "uid-b", "team", "b"))
    path = calls_file(short_dir)

    assert main(["calls", "--file", str(path), "--claim", "team/b"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split() == ["TIME", "METHOD", "CLAIMS", "RESULT", "DURATION"]
    assert row.split()[1:4] == ["NodePrepareResources", "team/b", "error"]
    assert re.fullmatch(r"\d+\.\dms", row.split()[4])
    assert row.endswith("  uid-b: no GPU left")

    assert main(["calls", "--file", str(path), "--method", "NodePrepareResources", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["claims"] for line in lines] == [["team/a:uid-a"], ["team/b:uid-b"]]
