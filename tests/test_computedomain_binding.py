"""KEP-5007 binding conditions of ComputeDomain channel devices (opt-in `--binding-conditions`): the
channel device's fields (drivers.computedomain.slices), the conditions the controller computes
(computedomain.controller.binding) and what its sync writes (loop.Controller.sync_binding, through
runtime.claimstatus)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fakeplugin import releases
from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.controller import binding
from fakeplugin.drivers.computedomain.controller.binding import Channel
from fakeplugin.drivers.computedomain.controller.loop import Controller
from fakeplugin.drivers.computedomain.controller.objects import DaemonSettings
from fakeplugin.drivers.computedomain.controller.reconcile import Mode
from fakeplugin.drivers.computedomain.slices import node_slices, published_devices
from fakeplugin.faults.daemonfaults import FAILED_ANNOTATION
from fakeplugin.runtime.claimstatus import status_devices

UID = "cd-uid-1"
NODE = "gb200-0"
CD_DRIVER = api.DRIVER_NAME
KEY = (CD_DRIVER, NODE, "channel-0", "")
READY, FAILED = api.READY_CONDITION, api.FAILED_CONDITION


def test_the_channel_device_carries_the_conditions_only_when_asked() -> None:
    plain = published_devices()
    assert plain == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]
    channel, daemon = published_devices(binding_conditions=True)
    assert channel == plain[0] | {
        "bindingConditions": ["ComputeDomainDaemonReady"],
        "bindingFailureConditions": ["ComputeDomainDaemonFailed"],
    }
    assert daemon == plain[1]  # the daemon pod must bind at once: it is what makes the channel ready
    assert "bindsToNode" not in channel  # the node's own slice: the allocation names the node anyway
    release = releases.get(None)
    slices = node_slices(
        NODE, node_uid="u", driver=CD_DRIVER, release=release, publishes=True, binding_conditions=True
    )
    assert slices[0]["spec"]["devices"][0]["bindingConditions"] == [READY]
    off = node_slices(NODE, node_uid="u", driver=CD_DRIVER, release=release, publishes=True)
    assert off[0]["spec"]["devices"] == plain


def claim(results: list[dict[str, Any]] | None = None, devices: list[dict[str, Any]] | None = None) -> dict:
    """A workload channel claim as the scheduler leaves it allocated on NODE."""
    results = results or [
        {
            "request": "channel",
            "driver": CD_DRIVER,
            "pool": NODE,
            "device": "channel-0",
            "bindingConditions": [READY],
            "bindingFailureConditions": [FAILED],
        }
    ]
    config = {
        "source": "FromClaim",
        "requests": ["channel"],
        "opaque": {
            "driver": CD_DRIVER,
            "parameters": {"apiVersion": api.API_VERSION, "kind": api.CHANNEL_CONFIG_KIND, "domainID": UID},
        },
    }
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
    }
    status: dict[str, Any] = {
        "allocation": {"devices": {"results": results, "config": [config]}, "nodeSelector": selector}
    }
    if devices is not None:
        status["devices"] = devices
    return {
        "kind": "ResourceClaim",
        "metadata": {"namespace": "work", "name": "w-chan", "resourceVersion": "7"},
        "status": status,
    }


def test_channels_of_an_allocated_claim() -> None:
    assert binding.channels(claim(), CD_DRIVER) == [Channel(CD_DRIVER, NODE, "channel-0", NODE, UID)]
    # The scheduler leaves a template claim's config without `requests`: it applies to every request.
    unnamed = claim()
    del unnamed["status"]["allocation"]["devices"]["config"][0]["requests"]
    assert binding.channels(unnamed, CD_DRIVER) == [Channel(CD_DRIVER, NODE, "channel-0", NODE, UID)]
    gpu = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"}
    plain = {"request": "channel", "driver": CD_DRIVER, "pool": NODE, "device": "channel-0"}
    assert binding.channels(claim([gpu, plain]), CD_DRIVER) == []  # published without: nothing to answer
    assert binding.channels({"metadata": {}, "status": {}}, CD_DRIVER) == []  # not allocated
    assert binding.allocated_node({}) == ""


def node(**annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": NODE, "resourceVersion": "3", "labels": {}, "annotations": annotations}}


def cd(status: str | None) -> dict[str, Any]:
    nodes = [] if status is None else [{"name": NODE, "status": status, "index": 0, "cliqueID": "c.1"}]
    meta = {"name": "cd", "namespace": "work", "uid": UID, "resourceVersion": "5"}
    return {"metadata": meta, "status": {"status": "NotReady", "nodes": nodes}}


def summary(conditions: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in conditions]


def test_conditions_follow_the_nodes_daemon() -> None:
    ch = Channel(CD_DRIVER, NODE, "channel-0", NODE, UID)
    not_failed = (FAILED, "False", "DaemonNotFailed")
    assert summary(binding.conditions(ch, cd(None), node())) == [
        (READY, "False", "DaemonNotStarted"),
        not_failed,
    ]
    assert summary(binding.conditions(ch, cd("NotReady"), node())) == [
        (READY, "False", "DaemonNotReady"),
        not_failed,
    ]
    assert summary(binding.conditions(ch, cd("Ready"), node())) == [
        (READY, "True", "DaemonReady"),
        not_failed,
    ]
    assert summary(binding.conditions(ch, None, node())) == [
        (READY, "False", "ComputeDomainNotFound"),
        not_failed,
    ]
    failed = binding.conditions(ch, cd("Ready"), node(**{FAILED_ANNOTATION: "IMEX session in use"}))
    assert summary(failed) == [(READY, "False", "DaemonFailed"), (FAILED, "True", "DaemonFailed")]
    assert failed[1]["message"] == f"the ComputeDomain daemon on node {NODE} failed: IMEX session in use"
    other = node()
    other["metadata"]["labels"][api.COMPUTE_DOMAIN_LABEL] = "another-uid"
    taken = binding.conditions(ch, cd("Ready"), other)
    assert summary(taken) == [
        (READY, "False", "NodeInOtherComputeDomain"),
        (FAILED, "True", "NodeInOtherComputeDomain"),
    ]
    assert binding.needs_label(node(), UID) and not binding.needs_label(other, UID)
    assert not binding.needs_label(None, UID) and not binding.needs_label(node(), "")


def test_status_devices_are_idempotent_and_keep_what_is_not_ours() -> None:
    ch = Channel(CD_DRIVER, NODE, "channel-0", NODE, UID)
    foreign = {"driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0", "data": {"x": 1}}
    waiting = binding.conditions(ch, cd("NotReady"), node())
    first = status_devices(claim(devices=[foreign]), {KEY: {"conditions": waiting}}, "2026-12-04T13:00:00Z")
    assert first is not None and first[0] == foreign
    assert first[1]["conditions"][0] | {} == waiting[0] | {"lastTransitionTime": "2026-12-04T13:00:00Z"}
    # The same answer again: nothing to write.
    assert (
        status_devices(claim(devices=first), {KEY: {"conditions": waiting}}, "2026-12-04T13:00:09Z") is None
    )
    # Another reason with the same status keeps the transition time; a new status moves it.
    entry = copy.deepcopy(first[1])
    entry["conditions"].append({"type": "Other", "status": "True", "reason": "Theirs", "message": ""})
    started = binding.conditions(ch, cd(None), node())
    again = status_devices(claim(devices=[entry]), {KEY: {"conditions": started}}, "2026-12-04T13:00:20Z")
    assert again is not None
    by_type = {c["type"]: c for c in again[0]["conditions"]}
    assert by_type[READY]["reason"] == "DaemonNotStarted"
    assert by_type[READY]["lastTransitionTime"] == "2026-12-04T13:00:00Z"
    assert by_type["Other"]["reason"] == "Theirs"
    conditions = binding.conditions(ch, cd("Ready"), node())
    ready = status_devices(claim(devices=again), {KEY: {"conditions": conditions}}, "2026-12-04T13:00:30Z")
    assert ready is not None
    by_type = {c["type"]: c for c in ready[0]["conditions"]}
    assert (by_type[READY]["status"], by_type[READY]["lastTransitionTime"]) == (
        "True",
        "2026-12-04T13:00:30Z",
    )
    assert by_type[FAILED]["lastTransitionTime"] == "2026-12-04T13:00:00Z"  # False all along


def merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch."""
    out = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class MergingKube:
    """Records requests; keeps objects by path; patches merge as the API server's merge patches do; writes
    bump the resourceVersion."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.sent: dict[str, Any] = {}

    def seed(self, cache: Any, path: str, obj: dict[str, Any]) -> None:
        self.objects[path] = obj
        cache.event("ADDED", copy.deepcopy(obj))

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PATCH", path))
        return self._store(path, merge(self.objects[path.removesuffix("/status")], body))

    def replace(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("PUT", path))
        self.sent = copy.deepcopy(body)
        return self._store(path, body)

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        self.objects[path.removesuffix("/status")] = obj
        return copy.deepcopy(obj)


CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/work/resourceclaims/w-chan"
NODE_PATH = f"/api/v1/nodes/{NODE}"


def test_the_controller_labels_the_node_and_writes_the_claim_status_once() -> None:
    kube = MergingKube()
    mode = Mode(
        daemon=DaemonSettings("drv", "img", 18, {"ComputeDomainCliques": True}), binding_conditions=True
    )
    c = Controller(kube, mode)
    kube.seed(c.claims, CLAIM_PATH, claim())
    kube.seed(c.nodes, NODE_PATH, node())
    kube.seed(c.cds, "/apis/resource.nvidia.com/v1beta1/namespaces/work/computedomains/cd", cd("NotReady"))
    c.sync_binding()
    assert kube.calls == [("PATCH", NODE_PATH), ("PUT", f"{CLAIM_PATH}/status")]
    assert kube.objects[NODE_PATH]["metadata"]["labels"] == {api.COMPUTE_DOMAIN_LABEL: UID}
    # The claim as read (its resourceVersion the precondition), only status.devices added.
    written = kube.objects[CLAIM_PATH]
    assert kube.sent == claim() | {"apiVersion": "resource.k8s.io/v1", "status": written["status"]}
    assert written["status"]["allocation"] == claim()["status"]["allocation"]
    [entry] = written["status"]["devices"]
    assert (entry["driver"], entry["pool"], entry["device"], "") == KEY
    assert summary(entry["conditions"]) == [
        (READY, "False", "DaemonNotReady"),
        (FAILED, "False", "DaemonNotFailed"),
    ]
    c.sync_binding()  # unchanged: no write
    assert len(kube.calls) == 2
    ready = cd("Ready")
    ready["metadata"]["resourceVersion"] = "9"
    c.cds.event("MODIFIED", ready)
    c.sync_binding()
    assert kube.calls[2:] == [("PUT", f"{CLAIM_PATH}/status")]
    [entry] = kube.objects[CLAIM_PATH]["status"]["devices"]
    assert summary(entry["conditions"])[0] == (READY, "True", "DaemonReady")


def test_the_switch_reaches_the_plugins_and_is_refused_without_daemons() -> None:
    from fakeplugin.cli import build_parser
    from fakeplugin.commands.computedomaincontroller import run as run_controller
    from fakeplugin.commands.fleet import fleet_drivers

    def fleet(*flags: str) -> Any:
        args = build_parser().parse_args(["fleet", "--inventory", "inv.yaml", "--compute-domains", *flags])
        return fleet_drivers(args, "", kube=None)[1]  # type: ignore[arg-type]  # no API call while made

    assert fleet("--binding-conditions").binding_conditions and not fleet().binding_conditions
    serve = ["serve", "--plugin", "compute-domains"]
    assert build_parser().parse_args([*serve, "--binding-conditions"]).binding_conditions
    assert not build_parser().parse_args(serve).binding_conditions
    host_managed = build_parser().parse_args(
        [
            "compute-domain-controller",
            *("--driver-release", "0.5.0-dev", "--feature-gates", "HostManagedIMEXDaemon=true"),
            *("--imex-mode", "hostManaged", "--binding-conditions"),
        ]
    )
    with pytest.raises(ValueError, match="--binding-conditions needs driver-managed daemons"):
        run_controller(host_managed)


def test_the_cluster_remembers_the_switch() -> None:
    from fakeplugin.cluster.state import State

    state = State(inventory="i.yaml", server="s", feature_gates={}, plugin=True, ports={}, nodes=[])
    assert state.to_json()["bindingConditions"] is False
    state.binding_conditions = True
    assert State.from_json(state.to_json()).binding_conditions
    older = state.to_json()
    del older["bindingConditions"]  # a cluster.json written before the switch existed
    assert not State.from_json(older).binding_conditions


def test_the_schedulers_binding_timeout(tmp_path: Any) -> None:
    from fakeplugin.cluster.components import scheduler_config
    from fakeplugin.cluster.layout import StateLayout

    layout = StateLayout(tmp_path)
    assert "profiles" not in scheduler_config(layout)  # the scheduler's 600 s
    assert scheduler_config(layout, binding_timeout=45)["profiles"] == [
        {
            "schedulerName": "default-scheduler",
            "pluginConfig": [{"name": "DynamicResources", "args": {"bindingTimeout": "45s"}}],
        }
    ]
