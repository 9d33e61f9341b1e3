"""The telemetry endpoint over real sockets: bounded answers to a crowd, renders shared, loopback by default;
and the kubelet PodResources client against a real gRPC server on a unix socket."""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import http.client
import socket
import threading
import time
import tracemalloc
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fakeplugin._proto.podresources.v1 import api_pb2, api_pb2_grpc
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.endpoint import Endpoint, SharedRender, parse_endpoint
from fakeplugin.telemetry.podresources import PodResources, uses_of

BODY = b"# HELP X x\n# TYPE X gauge\nX 1\n" * 2000  # 64 KB, a node's worth


def get(port: int, path: str = "/metrics", timeout: float = 10.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_parse_endpoint() -> None:
    assert parse_endpoint("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_endpoint(":9400") == ("127.0.0.1", 9400)  # loopback unless told
    assert parse_endpoint("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_endpoint("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError, match=f"--telemetry-endpoint '{bad}': expected HOST:PORT"):
            parse_endpoint(bad)


def test_pages_and_headers() -> None:
    endpoint = Endpoint(lambda: [BODY], "127.0.0.1", 0).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=5)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200 and response.read() == BODY
        assert response.getheader("Content-Type") == "text/plain; charset=utf-8"
        assert response.getheader("X-Content-Type-Options") == "nosniff"
        conn.close()
        assert get(endpoint.port, "/health") == (200, b"OK")
        assert get(endpoint.port, "/nope")[0] == 404
    finally:
        endpoint.close()


def test_a_failing_render_is_a_500_and_the_endpoint_stays_up() -> None:
    calls = []

    def render() -> list[bytes]:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return [BODY]

    endpoint = Endpoint(render, "127.0.0.1", 0, interval=0.0).start()
    try:
        assert get(endpoint.port) == (500, b"render failed: boom\n")
        assert get(endpoint.port) == (200, BODY)
    finally:
        endpoint.close()


def test_scrapes_within_the_interval_share_one_render() -> None:
    calls = []
    clock = [0.0]
    shared = SharedRender(lambda: calls.append(1) or [b"x"], interval=1.0, clock=lambda: clock[0])
    first = shared.get()
    assert shared.get() is first and gzip.decompress(first.gzip) == b"x" and first.size == 1
    assert len(calls) == 1
    clock[0] = 1.5
    shared.get()
    assert len(calls) == 2


def test_a_hundred_concurrent_clients_get_bounded_answers_with_bounded_memory() -> None:
    """100 real clients at once against a slow render (0.3 s): each gets 200 with the whole body or a quick
    503; at most max_connections handler threads run; the render runs a handful of times, not 100; the
    allocations (clients' and server's) stay within what the bodies received and the handlers explain."""
    renders = []
    active = [0, 0]  # now, most
    lock = threading.Lock()

    def slow() -> list[bytes]:
        renders.append(1)
        time.sleep(0.3)
        return [BODY]

    endpoint = Endpoint(slow, "127.0.0.1", 0, interval=5.0, max_connections=8).start()
    before = threading.active_count()

    def client(_: int) -> tuple[int, bytes, float]:
        started = time.monotonic()
        status, body = get(endpoint.port)
        with lock:
            active[1] = max(active[1], threading.active_count() - before)
        return status, body, time.monotonic() - started

    tracemalloc.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(100) as pool:
            answers = list(pool.map(client, range(100)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        endpoint.close()
    ok = [a for a in answers if a[0] == 200]
    busy = [a for a in answers if a[0] == 503]
    assert len(ok) + len(busy) == 100
    assert ok and all(body == BODY for _, body, _ in ok)
    assert all(body.startswith(b"too many concurrent scrapes") for _, body, _ in busy)
    assert all(seconds < 2.0 for _, _, seconds in busy)  # answered at once, not queued behind the render
    assert len(renders) <= 2  # shared: the first render, perhaps one more at the interval's edge
    # Our 100 client threads are the pool's; the server added at most its 8 handlers (+ a little slack).
    assert active[1] <= 100 + 8 + 2
    # The clients keep the bodies they got; the server adds at most a copy per handler, plus bookkeeping:
    # never a render or a body per client.
    assert peak < (len(ok) + 2 * 8) * len(BODY) + 2 * 2**20


def test_gzip_for_scrapers_that_accept_it_and_the_text_in_pieces_for_others() -> None:
    """Prometheus asks for gzip and gets the kept body as it is; a client that does not gets the text,
    decompressed piece by piece (a body of many pieces: 4 MiB of varied lines), the same bytes."""
    big = b"".join(b'DCGM_FI_DEV_GPU_UTIL{gpu="%d"} %d\n' % (i, i * 7919 % 101) for i in range(150_000))
    assert len(big) > 4 * 2**20
    endpoint = Endpoint(lambda: [big[: len(big) // 2], big[len(big) // 2 :]], "127.0.0.1", 0).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=10)
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        response = conn.getresponse()
        compressed = response.read()
        assert response.getheader("Content-Encoding") == "gzip"
        assert int(response.getheader("Content-Length")) == len(compressed) < len(big) // 3
        assert gzip.decompress(compressed) == big
        conn.close()
        conn = http.client.HTTPConnection("127.0.0.1", endpoint.port, timeout=10)
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.getheader("Content-Encoding") is None
        assert int(response.getheader("Content-Length")) == len(big)
        assert response.read() == big
        conn.close()
    finally:
        endpoint.close()


def test_a_client_that_sends_nothing_is_dropped_after_the_timeout() -> None:
    endpoint = Endpoint(lambda: [BODY], "127.0.0.1", 0, timeout=0.5, max_connections=1).start()
    try:
        idle = socket.create_connection(("127.0.0.1", endpoint.port))
        time.sleep(0.1)
        assert get(endpoint.port)[0] == 503  # the idle one holds the only slot
        idle.settimeout(5)
        assert idle.recv(1) == b""  # closed by the server once its timeout passed
        idle.close()
        time.sleep(0.1)
        assert get(endpoint.port) == (200, BODY)
    finally:
        endpoint.close()


def test_loopback_only_by_default() -> None:
    endpoint = Endpoint(lambda: [], *parse_endpoint(":0")).start()
    try:
        assert endpoint._server.server_address[0] == "127.0.0.1"
    finally:
        endpoint.close()


# ---- PodResources ------------------------------------------------------------------------------------------


def answer() -> api_pb2.ListPodResourcesResponse:
    claim = api_pb2.ClaimResource(
        driver_name="gpu.nvidia.com",
        pool_name="node-a",
        device_name="gpu-1",
        cdi_devices=[api_pb2.CDIDevice(name="k8s.gpu.nvidia.com/claim=uid-gpu-1")],
    )
    container = api_pb2.ContainerResources(
        name="main",
        dynamic_resources=[
            api_pb2.DynamicResource(claim_name="big-gpu", claim_namespace="team-a", claim_resources=[claim])
        ],
    )
    plain = api_pb2.ContainerResources(name="sidecar")
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(name="trainer-0", namespace="team-a", containers=[container, plain])
        ]
    )


class Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        return answer()


EXPECTED = [Use("trainer-0", "team-a", "main", "big-gpu", "team-a", "gpu.nvidia.com", "node-a", "gpu-1")]


def serve_lister(sock: Path, lister: Lister) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    return server


def test_podresources_list_over_a_real_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"
    lister = Lister()
    server = serve_lister(sock, lister)
    client = PodResources(sock)
    try:
        assert client.uses() == EXPECTED
        lister.fail = True
        assert client.uses() == []  # logged; the series stay unattributed
        lister.fail = False
        assert client.uses() == EXPECTED
    finally:
        client.close()
        server.stop(None)


def test_podresources_without_a_socket_is_no_attribution(tmp_path: Path) -> None:
    assert PodResources(tmp_path / "absent.sock").uses() == []


def test_uses_of_the_kubelets_answer() -> None:
    assert uses_of(answer()) == EXPECTED


def flags(endpoint: str, counters: str = "", release: str = "4.6.0-4.8.3") -> argparse.Namespace:
    """The telemetry flags of serve and fleet, as argparse gives them."""
    return argparse.Namespace(
        telemetry_endpoint=endpoint,
        telemetry_counters=counters,
        telemetry_exporter_release=release,
        kubernetes_enable_pod_uid=False,
    )


def test_start_endpoint_refuses_a_bad_counters_file_address_or_release(tmp_path: Path) -> None:
    """serve and fleet start through start_endpoint: a bad flag is fatal at start, naming it."""
    from fakeplugin.telemetry.counters import CountersError
    from fakeplugin.telemetry.source import ClaimWatch, FleetAttribution
    from fakeplugin.telemetry.start import start_endpoint

    bad = tmp_path / "mine.csv"
    bad.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, ok\nDCGM_FI_NOPE, gauge, no\n")
    attribution = FleetAttribution(lambda node: [], ClaimWatch())  # never started: no claims
    with pytest.raises(CountersError, match=f"{bad}:2: unknown field 'DCGM_FI_NOPE'"):
        start_endpoint(flags("127.0.0.1:0", str(bad)), list, attribution)
    with pytest.raises(ValueError, match="--telemetry-endpoint 'nowhere'"):
        start_endpoint(flags("nowhere"), list, attribution)
    with pytest.raises(ValueError) as bad_release:
        start_endpoint(flags("127.0.0.1:0", release="4.8.4"), list, attribution)
    assert str(bad_release.value) == (
        '--telemetry-exporter-release: unknown dcgm-exporter release "4.8.4"; '
        "known: 4.5.3-4.8.2, 4.6.0-4.8.3, 4.6.1-4.8.4"
    )
    server = start_endpoint(flags("127.0.0.1:0"), list, attribution)
    try:
        assert get(server.port) == (200, b"")  # no nodes yet: no series, and no HELP without series
    finally:
        server.close()
