"""Contract tests of the gRPC edge: real unix sockets, generated stubs, a client acting as the kubelet."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2

from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin._proto.dra_health.v1alpha1 import api_pb2 as dh
from fakeplugin._proto.dra_health.v1alpha1 import api_pb2_grpc as dh_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.server import metrics
from fakeplugin.server.sockets import MAX_SOCKET_PATH_BYTES
from tests.harness import DRIVER
from tests.harness.server import GPU0, GPU1_SHARED, RPC_TIMEOUT_S, WIRE, CannedDriver, claim

# --- registration ---------------------------------------------------------------------------------------


def test_get_info_names_the_driver_and_an_absolute_dra_socket(
    serve: Any, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(short_dir)
    running = serve(plugins_dir=Path("plugins"))
    info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.type == "DRAPlugin"
    assert info.name == DRIVER
    assert info.endpoint == str(short_dir / "plugins" / DRIVER / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert (short_dir / "registry" / f"{DRIVER}-reg.sock").is_socket()
    assert Path(info.endpoint).is_socket()


def test_notify_registration_status(serve: Any) -> None:
    running = serve()
    stub = running.registration()
    assert not running.server.registered
    stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=RPC_TIMEOUT_S)
    assert running.server.registered
    with pytest.raises(grpc.RpcError) as failed:
        stub.NotifyRegistrationStatus(
            reg.RegistrationStatus(plugin_registered=False, error="endpoint already registered"),
            timeout=RPC_TIMEOUT_S,
        )
    assert failed.value.code() == grpc.StatusCode.UNKNOWN
    assert failed.value.details() == "failed registration process: endpoint already registered"
    assert not running.server.registered


def test_get_info_answers_while_the_core_is_blocked_in_prepare(serve: Any) -> None:
    gate = threading.Event()
    driver = CannedDriver({"uid-a": PrepareResult(devices=(GPU0,))}, gate=gate)
    running = serve(driver)
    pending = running.dra("v1").NodePrepareResources.future(
        v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-a")]), timeout=RPC_TIMEOUT_S * 3
    )
    try:
        assert driver.entered.wait(timeout=RPC_TIMEOUT_S), "the core was never called"
        info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
        assert info.name == DRIVER
        assert not gate.is_set() and not pending.done(), "GetInfo must answer while the core is still blocked"
    finally:
        gate.set()
    assert [d.device_name for d in pending.result().claims["uid-a"].devices] == ["gpu-0"]


# --- DRA services -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_prepare_answers_every_claim_exactly_once(serve: Any, version: str) -> None:
    api = WIRE[version][0]
    driver = CannedDriver(
        {
            "uid-a": PrepareResult(devices=(GPU0, GPU1_SHARED)),
            "uid-b": PrepareResult(devices=(GPU0,), error="claim default/claim-uid-b not allocated"),
            "../../etc": PrepareResult(error="claim UID '../../etc' is not a valid UID"),
            "uid-stranger": PrepareResult(devices=(GPU0,)),  # not asked for: must not reach the kubelet
        }
    )
    running = serve(driver)
    request = api.NodePrepareResourcesRequest(
        claims=[
            claim(api, "uid-a"),
            claim(api, "uid-b"),
            claim(api, "uid-omitted"),
            claim(api, "../../etc"),
            claim(api, "uid-no-ns", namespace=""),
            claim(api, "", name="nameless-uid"),
        ]
    )
    response = running.dra(version).NodePrepareResources(request, timeout=RPC_TIMEOUT_S)
    got = response.claims

    assert set(got) == {"uid-a", "uid-b", "uid-omitted", "../../etc", "uid-no-ns", ""}
    assert [ref.uid for ref in driver.calls[0][1]] == ["uid-a", "uid-b", "uid-omitted", "../../etc"]
    assert driver.calls[0][1][0] == ClaimRef(namespace="default", uid="uid-a", name="claim-uid-a")

    a = got["uid-a"]
    assert a.error == ""
    assert [(d.pool_name, d.device_name) for d in a.devices] == [("node1", "gpu-0"), ("node1", "gpu-1")]
    assert [list(d.request_names) for d in a.devices] == [["gpu"], []]
    assert [list(d.cdi_device_ids) for d in a.devices] == [
        list(GPU0.cdi_device_ids),
        list(GPU1_SHARED.cdi_device_ids),
    ]
    if version == "v1":
        assert not a.devices[0].HasField("share_id")
        assert a.devices[1].HasField("share_id") and a.devices[1].share_id == "6f1c0a3e-share"
    else:
        assert "share_id" not in api.Device.DESCRIPTOR.fields_by_name

    assert got["uid-b"].error == "claim default/claim-uid-b not allocated"
    assert not got["uid-b"].devices
    assert "no result" in got["uid-omitted"].error and "uid-omitted" in got["uid-omitted"].error
    assert got["../../etc"].error == "claim UID '../../etc' is not a valid UID"
    assert "namespace" in got["uid-no-ns"].error and "uid-no-ns" in got["uid-no-ns"].error
    assert "uid" in got[""].error and "nameless-uid" in got[""].error


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_unprepare_answers_every_claim_exactly_once(serve: Any, version: str) -> None:
    api = WIRE[version][0]
    driver = CannedDriver(unprepared={"uid-a": "", "uid-b": "removing CDI spec: permission denied"})
    running = serve(driver)
    request = api.NodeUnprepareResourcesRequest(
        claims=[claim(api, "uid-a"), claim(api, "uid-b"), claim(api, "uid-omitted"), claim(api, "x", name="")]
    )
    got = running.dra(version).NodeUnprepareResources(request, timeout=RPC_TIMEOUT_S).claims
    assert set(got) == {"uid-a", "uid-b", "uid-omitted", "x"}
    assert got["uid-a"].error == ""
    assert got["uid-b"].error == "removing CDI spec: permission denied"
    assert "no result" in got["uid-omitted"].error
    assert "name" in got["x"].error
    assert [ref.uid for ref in driver.calls[0][1]] == ["uid-a", "uid-b", "uid-omitted"]


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_empty_requests_get_empty_answers_without_the_core(serve: Any, version: str) -> None:
    api = WIRE[version][0]
    driver = CannedDriver({"uid-a": PrepareResult(devices=(GPU0,))}, {"uid-a": ""})
    stub = serve(driver).dra(version)
    assert not stub.NodePrepareResources(api.NodePrepareResourcesRequest(), timeout=RPC_TIMEOUT_S).claims
    assert not stub.NodeUnprepareResources(api.NodeUnprepareResourcesRequest(), timeout=RPC_TIMEOUT_S).claims
    assert driver.calls == []


def test_a_failing_core_fails_each_claim_not_the_call(serve: Any) -> None:
    running = serve(CannedDriver(RuntimeError("checkpoint unreadable")))
    request = v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-a"), claim(v1, "uid-b")])
    got = running.dra("v1").NodePrepareResources(request, timeout=RPC_TIMEOUT_S).claims
    assert {uid: r.error for uid, r in got.items()} == {
        "uid-a": "prepare resource claims: checkpoint unreadable",
        "uid-b": "prepare resource claims: checkpoint unreadable",
    }


def test_requests_and_responses_are_logged_at_trace_verbosity(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="fakeplugin.server")
    running = serve(CannedDriver({"uid-traced": PrepareResult(devices=(GPU0,))}), verbosity=6)
    request = v1.NodePrepareResourcesRequest(claims=[claim(v1, "uid-traced")])
    running.dra("v1").NodePrepareResources(request, timeout=RPC_TIMEOUT_S)
    lines = [r.getMessage() for r in caplog.records if "NodePrepareResources" in r.getMessage()]
    assert any("request" in line and 'uid: "uid-traced"' in line for line in lines), lines
    assert any("response" in line and 'device_name: "gpu-0"' in line for line in lines), lines


# --- sockets ----------------------------------------------------------------------------------------------


def test_stale_socket_is_replaced(serve: Any, short_dir: Path) -> None:
    stale = short_dir / "registry" / f"{DRIVER}-reg.sock"
    stale.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as leftover:  # a crashed run leaves its socket file behind
        leftover.bind(str(stale))
    assert stale.is_socket()
    info = serve().registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert info.name == DRIVER


def test_a_non_socket_at_the_path_is_an_error_and_kept(serve: Any, short_dir: Path) -> None:
    squatter = short_dir / "plugins" / DRIVER / "dra.sock"
    squatter.parent.mkdir(parents=True)
    squatter.write_text("not a socket")
    with pytest.raises(FileExistsError, match=str(squatter)):
        serve()
    assert squatter.read_text() == "not a socket"
    assert not (short_dir / "registry" / f"{DRIVER}-reg.sock").exists()


def plugins_dir_for_dra_socket_of(short_dir: Path, size: int) -> Path:
    """A plugins dir that makes the DRA socket path exactly `size` bytes long."""
    base = len(os.fsencode(short_dir / "p" / DRIVER / "dra.sock"))
    return short_dir / ("p" * (1 + size - base))


def test_socket_path_at_the_limit_is_served(serve: Any, short_dir: Path) -> None:
    running = serve(
        plugins_dir=plugins_dir_for_dra_socket_of(short_dir, MAX_SOCKET_PATH_BYTES), health_port=0
    )
    assert len(os.fsencode(running.server.paths.dra)) == MAX_SOCKET_PATH_BYTES
    status = running.health().Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S).status
    assert status == health_pb2.HealthCheckResponse.SERVING


def test_over_long_socket_path_is_refused_with_its_length(serve: Any, short_dir: Path) -> None:
    plugins = plugins_dir_for_dra_socket_of(short_dir, MAX_SOCKET_PATH_BYTES + 1)
    dra = plugins / DRIVER / "dra.sock"
    with pytest.raises(ValueError) as refused:
        serve(plugins_dir=plugins)
    assert str(dra) in str(refused.value)
    assert f"is {MAX_SOCKET_PATH_BYTES + 1} bytes long" in str(refused.value)
    assert not (short_dir / "registry").exists()


def test_pod_uid_socket_names_and_removal_on_stop(serve: Any, short_dir: Path) -> None:
    pod_uid = "0b6f8d2e-7c1a-4b7e-9a55-3f0d2c1e9b44"
    running = serve(pod_uid=pod_uid)
    registration = short_dir / "registry" / f"{DRIVER}-{pod_uid}-reg.sock"
    dra = short_dir / "plugins" / DRIVER / f"dra-{pod_uid}.sock"
    info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert running.server.paths.registration == registration and registration.is_socket()
    assert info.endpoint == str(dra) and dra.is_socket()
    running.server.stop()
    assert not registration.exists()
    assert not dra.exists()


def test_sigterm_stops_the_server_and_removes_both_sockets(short_dir: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from fakeplugin.server import ServerSettings, run

        class Idle:
            def prepare(self, claims): return {}
            def unprepare(self, claims): return {}

        root = Path(sys.argv[1])
        cfg = ServerSettings("gpu.nvidia.com", root / "registry", root / "plugins")
        run(Idle(), cfg)
        """
    )
    registration = short_dir / "registry" / f"{DRIVER}-reg.sock"
    dra = short_dir / "plugins" / DRIVER / "dra.sock"
    proc = subprocess.Popen([sys.executable, "-c", script, str(short_dir)], cwd=Path(__file__).parent.parent)
    try:
        with grpc.insecure_channel(f"unix:{registration}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(
                reg.InfoRequest(), timeout=RPC_TIMEOUT_S * 3, wait_for_ready=True
            )
        assert info.endpoint == str(dra) and dra.is_socket()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=RPC_TIMEOUT_S * 3) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not registration.exists()
    assert not dra.exists()


# --- health -----------------------------------------------------------------------------------------------


def test_liveness_serving_until_a_socket_is_gone(serve: Any) -> None:
    running = serve(health_port=0)
    health = running.health()
    serving = health.Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S)
    assert serving.status == health_pb2.HealthCheckResponse.SERVING
    liveness = health.Check(health_pb2.HealthCheckRequest(service="liveness"), timeout=RPC_TIMEOUT_S)
    assert liveness.status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as unknown:
        health.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=RPC_TIMEOUT_S)
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND

    os.unlink(running.server.paths.dra)
    broken = health.Check(health_pb2.HealthCheckRequest(), timeout=RPC_TIMEOUT_S)
    assert broken.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_liveness_is_off_by_default(serve: Any) -> None:
    assert serve().server.health_port is None


def test_device_health_streams_all_devices_healthy(serve: Any) -> None:
    devices = ("gpu-0", "gpu-1", "gpu-2")
    running = serve(
        device_health=True,
        device_health_pool="node1",
        device_health_devices=devices,
        device_health_interval_s=0.05,
        device_health_of=lambda name: ("gpu", None),
    )
    info = running.registration().GetInfo(reg.InfoRequest(), timeout=RPC_TIMEOUT_S)
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]

    # Kubelet 1.37 picks v1: the same stream under /v1.DRAResourceHealth/ (the messages are identical).
    v1_watch = running.channel(running.server.paths.dra).unary_stream(
        "/v1.DRAResourceHealth/NodeWatchResources",
        request_serializer=dh.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=dh.NodeWatchResourcesResponse.FromString,
    )
    v1_stream = v1_watch(dh.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S * 3)
    assert [d.device.device_name for d in next(v1_stream).devices] == list(devices)
    v1_stream.cancel()

    stub = dh_grpc.DRAResourceHealthStub(running.channel(running.server.paths.dra))
    stream = stub.NodeWatchResources(dh.NodeWatchResourcesRequest(), timeout=RPC_TIMEOUT_S * 3)
    updates = [next(stream), next(stream)]
    for update in updates:
        assert [(d.device.pool_name, d.device.device_name) for d in update.devices] == [
            ("node1", name) for name in devices
        ]
        assert {d.health for d in update.devices} == {dh.HEALTHY}
        assert {d.health_check_timeout_seconds for d in update.devices} == {30}
        assert all(d.last_updated_time > 1_700_000_000 for d in update.devices)

    # Stopping ends open watches cleanly instead of cutting them off.
    running.server.stop()
    list(stream)  # drain updates sent before the stop; the stream must then end with OK
    assert stream.code() == grpc.StatusCode.OK


# --- metrics --------------------------------------------------------------------------------------------


def scrape(port: int) -> dict[str, float]:
    """The metrics page as {'name{labels}': value}, read over HTTP as Prometheus reads it."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = (line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in samples}


def test_metrics_count_requests_and_failed_claims_under_nvidias_names(serve: Any) -> None:
    port = metrics.serve("127.0.0.1:0")
    running = serve(
        CannedDriver({"uid-a": PrepareResult(devices=(GPU0,)), "uid-b": PrepareResult(error="no")})
    )
    labels = f'driver="{DRIVER}",operation="NodePrepareResources"'
    errors = f'driver="{DRIVER}",error_type="prepare_devices"'
    before = scrape(port)
    api = WIRE["v1"][0]
    request = api.NodePrepareResourcesRequest(claims=[claim(api, "uid-a"), claim(api, "uid-b")])
    running.dra("v1").NodePrepareResources(request)
    after = scrape(port)

    def delta(name: str) -> float:
        return after.get(name, 0.0) - before.get(name, 0.0)

    assert delta(f"nvidia_dra_requests_total{{{labels}}}") == 1
    assert delta(f"nvidia_dra_request_duration_seconds_count{{{labels}}}") == 1
    assert after[f"nvidia_dra_requests_inflight{{{labels}}}"] == 0
    assert delta(f"nvidia_dra_node_prepare_errors_total{{{errors}}}") == 1


def test_prometheus_client_is_loaded_only_when_metrics_are_served() -> None:
    code = (
        "import sys\n"
        "import fakeplugin.commands.serve, fakeplugin.server.app, fakeplugin.drivers.gpu.prepare.preparer\n"
        "print('prometheus_client' in sys.modules)\n"
        "from fakeplugin.server import metrics\n"
        "metrics.serve('127.0.0.1:0')\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["False", "True"]
