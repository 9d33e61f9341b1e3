"""The ComputeDomain driver's own client (drivers/computedomain/client.py): its ComputeDomains by UID from
one informer per driver (list + watch), a lookup before the first list or of a UID not seen yet answered
by one more list, the informer started by a node's start and stopped by `close`; its node calls over the
REST client's generic ones."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.apis import computedomain as cd_api
from fakeplugin.drivers.computedomain import ComputeDomainDriver, DomainClient
from fakeplugin.drivers.computedomain.domains import DomainError, DomainManager
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.runtime.driver import NodeDirs
from fakeplugin.runtime.emulation import emulation
from tests.harness.computedomain import BOOT, CD_DRIVER, CD_UID, CLUSTER, NAMESPACE, inventory
from tests.harness.kube import wait_for

PATH = cd_api.compute_domains_path()
OTHER = "7a1d2c3b-0000-4000-8000-000000000002"


def domain(uid: str, name: str = "imex", namespace: str = "team-a") -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace, "resourceVersion": "1"}}


class Server:
    """The API server's ComputeDomains (`objects`), every list recorded; a watch hands out the events put
    in `events` and ends only when `ended` is set."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {o["metadata"]["uid"]: o for o in objects}
        self.lists: list[str] = []
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.ended = threading.Event()
        self.calls: list[tuple[str, str, Any]] = []

    def list(self, path: str, **_: Any) -> tuple[list[dict[str, Any]], str]:
        self.lists.append(path)
        return list(self.objects.values()), "1"

    def watch(self, path: str, *, resource_version: str, **_: Any) -> Iterator[dict[str, Any]]:
        while not self.ended.is_set():
            try:
                yield self.events.get(timeout=0.02)
            except queue.Empty:
                continue

    def get(self, path: str) -> dict[str, Any]:
        self.calls.append(("GET", path, None))
        return {"metadata": {"name": path.rsplit("/", 1)[-1]}}

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path, body))
        return body

    create = replace = patch


def informers() -> int:
    return sum(t.name == "computedomains" and t.is_alive() for t in threading.enumerate())


def wait_no_informer() -> None:
    deadline = time.monotonic() + 5
    while informers() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.fixture
def server() -> Iterator[Server]:
    found = Server(domain(CD_UID))
    yield found
    found.ended.set()  # a stopped informer's watch ends: its thread too, before the next test counts
    wait_no_informer()


def test_before_its_start_every_lookup_lists(server: Server) -> None:
    client = DomainClient(server)  # type: ignore[arg-type]
    assert client.compute_domain(CD_UID) == domain(CD_UID)
    assert client.compute_domain(OTHER) is None
    assert server.lists == [PATH, PATH]


def test_once_synced_a_lookup_is_the_caches_and_a_miss_lists_once_more(server: Server) -> None:
    client = DomainClient(server)  # type: ignore[arg-type]
    client.start()
    client.start()  # idempotent: one informer
    assert client.domains.synced.wait(5)
    assert server.lists == [PATH] and informers() == 1

    assert client.compute_domain(CD_UID) == domain(CD_UID)
    assert server.lists == [PATH]  # from the cache

    server.objects[OTHER] = domain(OTHER, "new")  # created just now: the watch has not brought it yet
    assert client.compute_domain(OTHER) == domain(OTHER, "new")
    assert server.lists == [PATH, PATH]
    assert client.compute_domain("no-such-uid") is None
    assert len(server.lists) == 3

    server.events.put({"type": "ADDED", "object": domain(OTHER, "new")})
    wait_for(lambda: client.domains._domains.get(OTHER), what="the watch's ADDED", timeout=5)
    assert client.compute_domain(OTHER) == domain(OTHER, "new")
    assert len(server.lists) == 3

    del server.objects[CD_UID]
    server.events.put({"type": "DELETED", "object": domain(CD_UID)})
    wait_for(lambda: CD_UID not in client.domains._domains or None, what="the watch's DELETED", timeout=5)
    assert client.compute_domain(CD_UID) is None  # re-checked: gone there too
    assert len(server.lists) == 4
    client.stop()


def test_the_managers_texts_over_the_client(server: Server) -> None:
    client = DomainClient(server)  # type: ignore[arg-type]
    manager = DomainManager(
        client, node_name="n1", namespace=NAMESPACE, clique_id=lambda: "", cliques_gate=False
    )
    with pytest.raises(DomainError, match=f"^ComputeDomain not found: {OTHER}$"):
        manager.domain(OTHER)

    def refuse(path: str, **_: Any) -> Any:
        raise RuntimeError("refused")

    server.list = refuse  # type: ignore[method-assign]
    with pytest.raises(DomainError, match=r"^error getting ComputeDomain: refused$"):
        manager.domain(CD_UID)


def test_the_node_calls_are_the_rest_clients_generic_ones(server: Server) -> None:
    client = DomainClient(server)  # type: ignore[arg-type]
    client.get_node("n 1")
    client.patch_node_labels("n1", {"a": "b", "c": None}, resource_version="7")
    client.patch_node_labels("n1", {"a": "b"}, resource_version="")
    client.compute_domain_clique(NAMESPACE, "x.y")
    assert server.calls == [
        ("GET", "/api/v1/nodes/n%201", None),
        (
            "PATCH",
            "/api/v1/nodes/n1",
            {"metadata": {"labels": {"a": "b", "c": None}, "resourceVersion": "7"}},
        ),
        ("PATCH", "/api/v1/nodes/n1", {"metadata": {"labels": {"a": "b"}}}),
        ("GET", cd_api.clique_path(NAMESPACE, "x.y"), None),
    ]


def test_a_fleets_nodes_share_one_informer_from_the_first_start_to_close(
    server: Server, tmp_path: Path
) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump(inventory(clique=2, clusterUUID=CLUSTER)))
    client = DomainClient(server)  # type: ignore[arg-type]
    driver = ComputeDomainDriver(emulation(release="", driver_name=CD_DRIVER), client, retry_seconds=0)
    plugins = []
    for name in ("gb200-a-0", "gb200-a-1", "gb200-a-2"):
        dirs = NodeDirs(cdi_root=tmp_path / name / "cdi", plugin_dir=tmp_path / name / "plugin")
        plugin = driver.node(name, InventoryFile(inv), dirs=dirs, boot_id=BOOT, get_claim=server.get)  # type: ignore[arg-type]
        plugin.set_node({"metadata": {"name": name, "uid": f"uid-{name}", "labels": {}}})
        plugins.append(plugin)
    assert informers() == 0  # making a node starts nothing
    for plugin in plugins:
        plugin.open()
    assert client.domains.synced.wait(5)
    assert informers() == 1 and server.lists == [PATH]

    for plugin in plugins:
        plugin.close()
    assert not client.domains.synced.is_set()
    server.events.put({"type": "MODIFIED", "object": domain(CD_UID)})  # the stopped watch sees its stop
    wait_no_informer()
    assert informers() == 0
    assert client.compute_domain(CD_UID) == domain(CD_UID)  # stopped: a lookup lists again
    assert server.lists == [PATH, PATH]
