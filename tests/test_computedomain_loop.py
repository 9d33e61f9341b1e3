"""The controller's edges (computedomain.controller.loop) against a recording API: which requests a pass
makes, to which paths, from what its caches hold."""

from __future__ import annotations

import copy
from typing import Any

from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.controller.loop import Controller
from fakeplugin.drivers.computedomain.controller.objects import DaemonSettings
from fakeplugin.drivers.computedomain.controller.reconcile import Mode

UID = "u-1"


class RecordingKube:
    """Records requests; keeps what it is given (`objects`, by path) to answer patches as the API would."""

    def __init__(self, nodes: list[dict[str, Any]] = ()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.nodes = list(nodes)
        self.objects: dict[str, dict[str, Any]] = {}

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("POST", path))
        created = copy.deepcopy(body)
        created["metadata"]["resourceVersion"] = "1"
        self.objects[f"{path}/{body['metadata']['name']}"] = created
        return created

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path))
        obj = copy.deepcopy(self.objects.get(path.removesuffix("/status"), {"metadata": {}}))
        obj.update({k: v for k, v in body.items() if k != "metadata"})
        obj["metadata"].update(body.get("metadata", {}))
        self.objects[path.removesuffix("/status")] = obj
        return obj

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        self.objects[path] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def delete(self, path: str) -> None:
        self.calls.append(("DELETE", path))

    def list(self, path: str, *, label_selector: str = "", field_selector: str = "") -> tuple[list, str]:
        self.calls.append(("LIST", f"{path}?labelSelector={label_selector}"))
        return self.nodes, "1"


def seed(kube: RecordingKube, cache: Any, path: str, obj: dict[str, Any]) -> None:
    kube.objects[path] = obj
    cache.event("ADDED", copy.deepcopy(obj))


CD_PATH = "/apis/resource.nvidia.com/v1beta1/namespaces/work/computedomains/cd"
CLIQUE_PATH = f"/apis/resource.nvidia.com/v1beta1/namespaces/drv/computedomaincliques/{UID}.x.1"


def controller(kube: RecordingKube) -> Controller:
    return Controller(kube, Mode(daemon=DaemonSettings("drv", "img", 18, {"ComputeDomainCliques": True})))


def cd(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "cd", "namespace": "work", "uid": UID, "resourceVersion": "5", **meta},
        "spec": {
            "numNodes": 1,
            "channel": {"resourceClaimTemplate": {"name": "chan"}, "allocationMode": "Single"},
        },
    }


def test_a_new_compute_domain():
    kube = RecordingKube()
    c = controller(kube)
    seed(kube, c.cds, CD_PATH, cd())
    c.reconcile_all()
    assert kube.calls == [
        (
            "LIST",
            "/api/v1/nodes?labelSelector=resource.nvidia.com/computeDomain,"
            "resource.nvidia.com/computeDomain notin (u-1)",
        ),
        ("PUT", "/apis/resource.nvidia.com/v1beta1/namespaces/work/computedomains/cd"),
        ("POST", "/apis/resource.k8s.io/v1/namespaces/drv/resourceclaimtemplates"),
        ("POST", "/apis/apps/v1/namespaces/drv/daemonsets"),
        ("POST", "/apis/resource.k8s.io/v1/namespaces/work/resourceclaimtemplates"),
        ("PATCH", "/apis/resource.nvidia.com/v1beta1/namespaces/work/computedomains/cd/status"),
    ]
    # what it created is in its caches at once: the next pass writes nothing
    kube.calls.clear()
    c.reconcile_all()
    assert kube.calls == []
    assert {o["metadata"]["name"] for o in c.templates.labelled(UID)} == {
        "chan",
        f"computedomain-daemon-{UID}",
    }


def test_status_sync_and_stale_clique_entries():
    kube = RecordingKube()
    c = controller(kube)
    seed(kube, c.cds, CD_PATH, cd(finalizers=[api.FINALIZER]))
    daemon = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "x.1", "index": 0, "status": "Ready"}
    seed(
        kube,
        c.cliques,
        CLIQUE_PATH,
        {
            "metadata": {
                "name": f"{UID}.x.1",
                "namespace": "drv",
                "resourceVersion": "3",
                "labels": {api.COMPUTE_DOMAIN_LABEL: UID},
            },
            "daemons": [daemon],
        },
    )
    c.sync_status()  # no daemon pod on n1: the entry is stale and goes; the status has no node yet
    assert kube.calls == [
        ("PATCH", f"/apis/resource.nvidia.com/v1beta1/namespaces/drv/computedomaincliques/{UID}.x.1"),
    ]


def test_teardown_requests():
    kube = RecordingKube(
        nodes=[
            {"metadata": {"name": "n1", "resourceVersion": "9", "labels": {api.COMPUTE_DOMAIN_LABEL: UID}}}
        ]
    )
    c = controller(kube)
    c.cds.event("ADDED", cd(finalizers=[api.FINALIZER], deletionTimestamp="2026-01-01T00:00:00Z"))
    c.templates.event(
        "ADDED",
        {
            "metadata": {
                "name": "chan",
                "namespace": "work",
                "resourceVersion": "1",
                "finalizers": [api.FINALIZER],
                "labels": {api.COMPUTE_DOMAIN_LABEL: UID, api.TARGET_LABEL: api.TARGET_WORKLOAD},
            }
        },
    )
    c._known = {UID}
    c.reconcile_all()
    assert kube.calls == [
        ("DELETE", "/apis/resource.k8s.io/v1/namespaces/work/resourceclaimtemplates/chan"),
        ("LIST", "/api/v1/nodes?labelSelector=resource.nvidia.com/computeDomain=u-1"),
        ("PATCH", "/api/v1/nodes/n1"),
    ]


def test_a_ready_daemon_with_its_pod_makes_the_compute_domain_ready():
    kube = RecordingKube()
    c = controller(kube)
    seed(kube, c.cds, CD_PATH, cd(finalizers=[api.FINALIZER]))
    daemon = {"nodeName": "n1", "ipAddress": "10.0.0.1", "cliqueID": "x.1", "index": 0, "status": "Ready"}
    meta = {
        "name": f"{UID}.x.1",
        "namespace": "drv",
        "resourceVersion": "3",
        "labels": {api.COMPUTE_DOMAIN_LABEL: UID},
    }
    seed(kube, c.cliques, CLIQUE_PATH, {"metadata": meta, "daemons": [daemon]})
    c.pods.event(
        "ADDED",
        {
            "metadata": {"name": "d", "namespace": "drv", "labels": {api.COMPUTE_DOMAIN_LABEL: UID}},
            "spec": {"nodeName": "n1"},
            "status": {"podIP": "10.0.0.1"},
        },
    )
    c.sync_status()
    assert kube.calls == [("PATCH", f"{CD_PATH}/status")]
    (current,) = c.cds.items()
    assert current["status"] == {
        "status": "Ready",
        "nodes": [{"name": "n1", **{k: v for k, v in daemon.items() if k != "nodeName"}}],
    }


def test_the_cache_drops_stale_answers_and_objects_without_finalizers_being_deleted():
    c = controller(RecordingKube())
    meta = {"name": "chan", "namespace": "work", "labels": {api.COMPUTE_DOMAIN_LABEL: UID}}
    c.templates.event("ADDED", {"metadata": {**meta, "resourceVersion": "5"}})
    c.templates.event("MODIFIED", {"metadata": {**meta, "resourceVersion": "4"}})  # an older answer
    assert [t["metadata"]["resourceVersion"] for t in c.templates.items()] == ["5"]
    # The watch's DELETED came first; then the answer to the write that removed the last finalizer.
    c.templates.event("DELETED", {"metadata": {**meta, "resourceVersion": "6"}})
    gone = {**meta, "resourceVersion": "6", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": []}
    c.templates.event("MODIFIED", {"metadata": gone})
    assert c.templates.items() == []
