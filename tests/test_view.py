"""The fleet view (fakeplugin.view): the model of objects in API shape (slices as `render` prints them,
taints as the plugin sets them), the store's versions, and the HTTP server over a real socket."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.inventory import load_inventory
from fakeplugin.render import render_compute_domains, render_documents
from fakeplugin.view.model import MAX_PAGE_SIZE, Query
from fakeplugin.view.objects import kinds
from fakeplugin.view.server import ViewServer, parse_endpoint, query_of
from fakeplugin.view.store import FleetStore
from tests.harness.paths import EXAMPLES

GPU, CD = "gpu.nvidia.com", "compute-domain.nvidia.com"


def node(name: str, *, ready: bool = True, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def slices(inventory: str, node_name: str, **kw: Any) -> list[dict[str, Any]]:
    """The node's slices as the plugin publishes them (`render`), named as the API server would."""
    docs = render_documents(load_inventory(EXAMPLES / inventory), node=node_name, **kw)
    out = [d for d in docs if d["kind"] == "ResourceSlice"]
    for i, s in enumerate(out):
        s["metadata"]["name"] = f"{node_name}-{i}"
    return out


def taint(slice_: dict[str, Any], device: str, fault: DeviceFault) -> None:
    (d,) = [d for d in slice_["spec"]["devices"] if d["name"] == device]
    d["taints"] = fault.taints(GPU)


def claim(ns: str, name: str, pool: str, device: str, pod: str, driver: str = GPU) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": driver, "pool": pool, "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
        },
    }


def pod(ns: str, name: str, phase: str, claims: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": "x", "containers": [{"name": "c"}]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
    return {
        "metadata": {"namespace": ns, "name": name, "uid": f"uid-{name}"},
        "spec": spec,
        "status": {"phase": phase},
    }


def fleet_store() -> FleetStore:
    """Three MIG nodes of examples/mig.yaml (one DynamicMIG), a seed-lab T10 node with faults, claims."""
    store = FleetStore(kinds(GPU, CD))
    t10 = "capi-dralabs-md-gput10-gzl84-f2m2d"
    seed = slices("seed-lab.yaml", t10, labels={"nvidia.com/gpu.product": "Tesla-T10"})
    taint(seed[0], "gpu-0", DeviceFault(xid=79))
    taint(seed[0], "gpu-1", DeviceFault(xid=13))
    store.replace(
        "nodes", [node("a100-static"), node("h200-static"), node("h200-dynamic", ready=False), node(t10)]
    )
    store.replace(
        "gpu-slices",
        [
            *slices("mig.yaml", "a100-static"),
            *slices("mig.yaml", "h200-static"),
            *slices("mig.yaml", "h200-dynamic", dynamic_mig=True),
            *seed,
        ],
    )
    store.replace(
        "claims",
        [
            claim("team-a", "mig-claim", "a100-static", "gpu-0-mig-1g5gb-19-3", "trainer"),
            claim("team-b", "broken-claim", t10, "gpu-0", "victim"),
        ],
    )
    store.replace(
        "pods", [pod("team-a", "trainer", "Running"), pod("team-b", "plain", "Running", claims=False)]
    )
    for kind in ("cd-slices", "domains", "cliques"):
        store.absent(kind)
    return store


def test_gpus_states_partitions_and_who_has_them() -> None:
    model = fleet_store().model()
    a100 = model.node("a100-static")
    assert a100 is not None
    (gpu,) = a100["gpus"]  # static MIG: the GPU is made from the partitions' parentUUID
    assert (gpu["name"], gpu["model"], len(gpu["partitions"])) == ("gpu-0", "NVIDIA A100-SXM4-40GB", 7)
    assert gpu["state"] == "allocated"  # one partition is
    (taken,) = [p for p in gpu["partitions"] if p["state"] == "allocated"]
    assert taken["name"] == "gpu-0-mig-1g5gb-19-3" and taken["profile"] == "1g.5gb"
    assert taken["claims"] == [
        {"namespace": "team-a", "name": "mig-claim", "pods": [{"name": "trainer", "phase": "Running"}]}
    ]
    assert [p["state"] for p in gpu["partitions"]].count("free") == 6

    dynamic = model.node("h200-dynamic")
    assert dynamic is not None and dynamic["ready"] is False
    assert [g["name"] for g in dynamic["gpus"]] == ["gpu-0", "gpu-1"]  # the GPU devices, partitions under
    assert {len(g["partitions"]) for g in dynamic["gpus"]} == {25}

    t10 = model.node("capi-dralabs-md-gput10-gzl84-f2m2d")
    assert t10 is not None
    first, second = t10["gpus"]
    assert first["state"] == "unhealthy" and first["health"] == "Unhealthy"  # allocated, then XID 79
    assert first["message"] == "critical XID 79 reported by NVML"
    assert first["taints"] == [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    assert first["claims"][0]["pods"] == [{"name": "victim", "phase": ""}]  # its pod is not (yet) seen
    assert (second["state"], second["health"]) == ("tainted", "Healthy")  # XID 13: skipped, effect None


def test_the_summary_counts_gpus_by_group_and_state() -> None:
    summary = fleet_store().model().summary
    assert summary["totals"] == {
        "nodes": 4,
        "notReady": 1,
        "gpus": 6,
        "partitions": 7 + 2 + 50,
        "states": {"unhealthy": 1, "tainted": 1, "allocated": 1, "free": 3},
    }
    groups = {g["name"]: (g["nodes"], g["gpus"], g["states"]) for g in summary["groups"]}
    assert groups["NVIDIA H200"] == (2, 3, {"unhealthy": 0, "tainted": 0, "allocated": 0, "free": 3})
    assert groups["NVIDIA T10"][2]["unhealthy"] == 1
    assert summary["groupedBy"] == "model" and summary["synced"] is True


def test_grouping_by_a_label() -> None:
    store = FleetStore(kinds(GPU, CD), group_label="pool")
    store.replace("nodes", [node("a", labels={"pool": "blue"}), node("b")])
    names = [g["name"] for g in store.model().summary["groups"]]
    assert names == ["(pool unset)", "blue"]


def test_pages_filter_and_are_bounded() -> None:
    model = fleet_store().model()
    assert [n["name"] for n in model.page(Query(state="unhealthy"))["nodes"]] == [
        "capi-dralabs-md-gput10-gzl84-f2m2d"
    ]
    assert [n["name"] for n in model.page(Query(text="TRAINER"))["nodes"]] == ["a100-static"]  # a pod's name
    assert [n["name"] for n in model.page(Query(group="NVIDIA H200"))["nodes"]] == [
        "h200-dynamic",
        "h200-static",
    ]
    page = model.page(Query(offset=1, limit=2))
    assert (page["total"], page["offset"], page["limit"], len(page["nodes"])) == (4, 1, 2, 2)
    assert "search" not in page["nodes"][0]
    assert model.page(Query(limit=10**6))["limit"] == MAX_PAGE_SIZE


def test_a_thousand_nodes_ship_a_page_not_the_fleet() -> None:
    (h200,) = slices("mig.yaml", "h200-dynamic")  # two H200 without DynamicMIG: whole GPUs
    store = FleetStore(kinds(GPU, CD))
    store.replace("nodes", [node(f"h200-{i}") for i in range(1000)])
    store.replace(
        "gpu-slices",
        [
            {
                **h200,
                "metadata": {"name": f"s-{i}"},
                "spec": {
                    **h200["spec"],
                    "nodeName": f"h200-{i}",
                    "pool": {"name": f"h200-{i}", "generation": 1},
                },
            }
            for i in range(1000)
        ],
    )
    started = time.perf_counter()
    model = store.model()
    built = time.perf_counter() - started
    assert model.summary["totals"]["gpus"] == 2000
    page = model.page(Query())
    assert len(page["nodes"]) == 50 and page["total"] == 1000
    assert [n["name"] for n in page["nodes"][:3]] == ["h200-0", "h200-1", "h200-2"]  # natural order
    assert len(json.dumps(page)) < len(json.dumps(model.page(Query(limit=1000)))) / 10
    assert built < 5.0, f"building the model of 1000 nodes took {built:.2f} s"


def test_racks_and_compute_domains() -> None:
    store = FleetStore(kinds(GPU, CD))
    clique = "a1b2.1"
    store.replace(
        "nodes", [node(f"rack-{i}", labels={cd_api.GPU_CLIQUE_LABEL: clique}) for i in range(2)] + [node("x")]
    )
    store.replace(
        "domains",
        [
            {
                "metadata": {"namespace": "team", "name": "wide", "uid": "cd-1"},
                "spec": {"numNodes": 2},
                "status": {
                    "status": "Ready",
                    "nodes": [{"name": "rack-0", "cliqueID": clique, "index": 0, "status": "Ready"}],
                },
            }
        ],
    )
    store.replace(
        "cliques",
        [
            {
                "metadata": {
                    "namespace": "nvidia-dra-driver-gpu",
                    "name": f"cd-1.{clique}",
                    "labels": {cd_api.COMPUTE_DOMAIN_LABEL: "cd-1"},
                },
                "daemons": [{"nodeName": "rack-0", "index": 0, "status": "Ready", "ipAddress": "127.0.0.1"}],
            }
        ],
    )
    store.replace("cd-slices", [])
    summary = store.model().summary
    (rack,) = summary["racks"]
    assert (rack["clique"], rack["nodes"]) == (clique, 2)
    assert rack["domains"] == [{"namespace": "team", "name": "wide", "status": "Ready"}]
    (domain,) = summary["domains"]
    assert domain["cliques"] == [
        {"clique": clique, "daemons": [{"nodeName": "rack-0", "index": 0, "status": "Ready"}]}
    ]
    assert [n["name"] for n in store.model().page(Query(rack=clique))["nodes"]] == ["rack-0", "rack-1"]


def test_compute_domain_channels_show_their_claims() -> None:
    docs = render_compute_domains(load_inventory(EXAMPLES / "nvl72.yaml"), driver=CD, node="gb200-rack-a-0")
    (cd_slice,) = [d for d in docs if d["kind"] == "ResourceSlice"]
    cd_slice["metadata"]["name"] = "cd"
    store = fleet_store()
    store.replace("nodes", [node("gb200-rack-a-0")])
    store.replace("cd-slices", [cd_slice])
    store.replace("claims", [claim("team", "channel", "gb200-rack-a-0", "channel-0", "job-0", driver=CD)])
    (n,) = store.model().nodes
    channel = next(c for c in n["channels"] if c["name"] == "channel-0")
    assert channel["state"] == "allocated" and channel["claims"][0]["pods"][0]["name"] == "job-0"


def test_the_store_changes_its_version_only_for_what_the_page_shows() -> None:
    store = FleetStore(kinds(GPU, CD))
    assert not store.synced
    store.replace("nodes", [node("a")])
    v = store.version
    store.apply(
        "nodes", "MODIFIED", {**node("a"), "metadata": {**node("a")["metadata"], "resourceVersion": "9"}}
    )
    assert store.version == v  # the same slim copy
    store.apply("pods", "ADDED", pod("ns", "no-claims", "Running", claims=False))
    assert store.version == v  # not a pod the page shows
    store.apply("nodes", "MODIFIED", node("a", ready=False))
    assert store.version == v + 1
    store.apply("nodes", "DELETED", node("a"))
    assert store.version == v + 2 and store.model().nodes == []
    for kind in store.kinds:
        store.replace(kind, [])
    assert store.synced


# -- the server, over a real socket -------------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[FleetStore, ViewServer]]:
    store = fleet_store()
    server = ViewServer(store, "127.0.0.1", 0, max_clients=4).start()
    yield store, server
    server.close()


def request(server: ViewServer, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*server.address, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_the_page_and_its_json(served: tuple[FleetStore, ViewServer]) -> None:
    _, server = served
    status, headers, body = request(server, "/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'<script src="view.js">' in body and b"http" not in body.replace(b"http-equiv", b"")  # no CDN
    status, headers, body = request(server, "/view.js")
    assert status == 200 and b'new EventSource("api/events")' in body and b"https://" not in body
    assert request(server, "/view.css")[0] == 200
    status, _, body = request(server, "/api/nodes?state=unhealthy")
    page = json.loads(body)
    assert page["total"] == 1 and page["nodes"][0]["gpus"][0]["message"] == "critical XID 79 reported by NVML"
    assert json.loads(request(server, "/api/summary")[2])["totals"]["nodes"] == 4
    assert json.loads(request(server, "/api/nodes/a100-static")[2])["name"] == "a100-static"
    assert request(server, "/api/nodes/nope")[0] == 404
    status, _, body = request(server, "/api/nodes?state=broken")
    assert status == 400 and b"state: 'broken': expected one of unhealthy, tainted, allocated, free" in body
    assert request(server, "/api/nodes?limit=-1")[0] == 400
    assert request(server, "/etc/passwd")[0] == 404
    assert request(server, "/healthz")[0] == 200


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "FROB"])
def test_everything_but_get_is_refused(served: tuple[FleetStore, ViewServer], method: str) -> None:
    status, headers, _ = request(served[1], "/api/summary", method)
    assert (status, headers["Allow"]) == (405, "GET, HEAD")


def test_not_healthy_until_every_watch_listed() -> None:
    store = FleetStore(kinds(GPU, CD))
    server = ViewServer(store, "127.0.0.1", 0).start()
    try:
        assert request(server, "/healthz")[0] == 503
        for kind in store.kinds:
            store.replace(kind, [])
        assert request(server, "/healthz")[0] == 200
    finally:
        server.close()


def read_event(stream: Any) -> dict[str, Any]:
    lines = []
    while (line := stream.readline()) not in (b"\n", b""):
        lines.append(line.decode().rstrip("\n"))
    if lines and lines[0].startswith(":"):
        return read_event(stream)  # a keepalive
    assert lines[0] == "event: change", lines
    return json.loads(lines[1].removeprefix("data: "))


def open_events(server: ViewServer) -> tuple[socket.socket, Any] | None:
    """A client of /api/events, its socket and its stream past the headers; None (closed) when the server
    answered 503, at its cap."""
    sock = socket.create_connection(server.address, timeout=10)
    sock.sendall(b"GET /api/events HTTP/1.1\r\nHost: x\r\n\r\n")
    stream = sock.makefile("rb")
    status = stream.readline()
    if status.startswith(b"HTTP/1.1 503"):
        stream.close()
        sock.close()
        return None
    assert status.startswith(b"HTTP/1.1 200"), status
    while stream.readline() != b"\r\n":
        pass
    return sock, stream


def test_events_follow_the_store_and_clients_are_capped(served: tuple[FleetStore, ViewServer]) -> None:
    store, server = served
    streams = []
    for _ in range(4):  # max_clients
        client = open_events(server)
        assert client is not None
        assert read_event(client[1]) == {"version": store.version}
        streams.append(client)
    status, headers, body = request(server, "/api/summary")  # one more
    assert (status, headers["Retry-After"], body) == (503, "1", b"too many clients (cap)")
    before = store.version
    threading.Timer(0.05, lambda: store.apply("nodes", "ADDED", node("new"))).start()
    for _, stream in streams:
        assert read_event(stream) == {"version": before + 1}
    sock, stream = streams.pop(0)  # one leaves
    stream.close()
    sock.close()
    # Its slot comes back once its handler sees it gone (it looks every GONE_CHECK seconds); the bound only
    # stops a broken server from hanging the test (5 s was once too short on a loaded machine). The probe
    # is the new client itself, an event stream that keeps the slot it got: a probe answered 200 and then
    # closed (as /healthz was here) holds its slot until its handler has read the close, after the probe
    # already had its answer, so the request right after it could find that slot still taken and get 503.
    # A refused probe takes no slot (the accepting thread answers it), so it cannot race.
    deadline = time.monotonic() + 60
    while (joined := open_events(server)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert joined is not None  # after one left, a new client got in
    assert read_event(joined[1]) == {"version": store.version}
    streams.append(joined)
    assert request(server, "/api/summary")[0] == 503  # and four at once are the cap again
    for sock, stream in streams:
        stream.close()
        sock.close()


def test_endpoints_and_queries_are_checked() -> None:
    assert parse_endpoint("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_endpoint("[::1]:8470") == ("::1", 8470)
    with pytest.raises(ValueError, match=r"--view-endpoint: '8470': expected HOST:PORT"):
        parse_endpoint("8470")
    assert query_of({"q": ["pod"], "offset": ["50"]}) == Query(text="pod", offset=50)
    with pytest.raises(ValueError, match="offset: 'x'"):
        query_of({"offset": ["x"]})


def test_a_host_starts_the_view_and_stops_it(tmp_path: Any) -> None:
    """start_view as `view` and `fleet --view-endpoint` run it: served before any watch could list (the
    API server here is unreachable: the watches retry with backoff), closed on `stop`; a taken port is
    an error naming the flag."""
    from fakeplugin.kube import Kube, new_api_client
    from fakeplugin.view.app import start_view

    config = tmp_path / "kubeconfig"
    config.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    kube = Kube(new_api_client(str(config)))
    stop = threading.Event()
    server = start_view(kube, "127.0.0.1:0", gpu_driver=GPU, cd_driver=CD, stop=stop)
    try:
        assert request(server, "/")[0] == 200
        assert request(server, "/healthz")[0] == 503  # nothing listed
        summary = json.loads(request(server, "/api/summary")[2])
        assert (summary["synced"], summary["totals"]["nodes"]) == (False, 0)
        taken = f"127.0.0.1:{server.address[1]}"
        with pytest.raises(ValueError, match=rf"--view-endpoint {taken}: Address already in use"):
            start_view(kube, taken, gpu_driver=GPU, cd_driver=CD, stop=stop)
    finally:
        stop.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            socket.create_connection(server.address, timeout=1).close()
        except OSError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the server still accepts connections after stop")
    for thread in [t for t in threading.enumerate() if t.name.startswith("view-")]:
        thread.join(timeout=10)  # the watches end on `stop` too (and log nothing after the test)
        assert not thread.is_alive(), thread.name
