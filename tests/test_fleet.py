"""The fleet's pure parts: kwok's stages, what the kubelet reads from a pod and hands each container, CDI
resolution for container records, and one inventory file shared by many nodes; what its reconcile loop
unprepares and removes, and that the pod watch keeps nothing of a pod that is done."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.drivers.gpu.publish.node import NodeDevices
from fakeplugin.fleet import kubelet, podclaims, reconcile, stages
from fakeplugin.fleet.dirs import FleetDirs
from fakeplugin.fleet.kubelet import FleetKubelet
from fakeplugin.fleet.poddra import PodDRA
from fakeplugin.fleet.records import load_devices, record_name, resolve
from fakeplugin.inventory.file import InventoryFile
from fakeplugin.model import ClaimRef, PreparedDevice, PrepareResult
from fakeplugin.runtime.driver import Claim
from tests.harness import DRIVER


def stage(name: str) -> dict[str, Any]:
    return next(s for s in stages.kwok_stages() if s["metadata"]["name"] == name)


def keys(s: dict[str, Any]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        e["key"]: (e["operator"], tuple(e.get("values", ())))
        for e in s["spec"]["selector"]["matchExpressions"]
    }


def test_pods_with_claims_run_only_once_prepared_and_go_only_once_unprepared() -> None:
    ready, prepared = keys(stage("pod-ready")), keys(stage("pod-ready-prepared"))
    assert ready[".spec.resourceClaims"] == ("DoesNotExist", ())
    assert ready[".status.extendedResourceClaimStatus"] == ("DoesNotExist", ())
    assert prepared['.metadata.annotations["fakeplugin.dev/prepared"]'] == ("In", ("true",))
    assert (
        ready[".metadata.deletionTimestamp"]
        == prepared[".metadata.deletionTimestamp"]
        == ("DoesNotExist", ())
    )
    delete, unprepared = keys(stage("pod-delete")), keys(stage("pod-delete-unprepared"))
    assert delete[".spec.resourceClaims"] == ("DoesNotExist", ())
    assert unprepared['.metadata.annotations["fakeplugin.dev/unprepared"]'] == ("In", ("true",))
    assert stage("pod-delete")["spec"]["next"] == {"delete": True}  # finalizers are their owners' (a Job's)
    assert "phase: Running" in stage("pod-ready-prepared")["spec"]["next"]["statusTemplate"]


def test_a_deleted_pod_is_failed_first_and_deleted_only_once_terminal_as_the_kubelet_does() -> None:
    terminate = stage("pod-terminate")
    assert keys(terminate)[".metadata.deletionTimestamp"] == ("Exists", ())
    assert keys(terminate)[".status.phase"] == ("NotIn", ("Succeeded", "Failed"))
    template = terminate["spec"]["next"]["statusTemplate"]
    assert "phase: Failed" in template and "exitCode: 137" in template and "reason: PodFailed" in template
    assert "DisruptionTarget" not in template  # the eviction's condition is merged, not overwritten
    for name in ("pod-delete", "pod-delete-unprepared"):
        assert keys(stage(name))[".status.phase"] == ("In", ("Succeeded", "Failed"))


def test_a_deleted_pod_with_claims_is_failed_only_once_unprepared_as_the_kubelet_does() -> None:
    # The kubelet unprepares before the terminal status (kubelet.go SyncTerminatingPod): the claim
    # controller deallocates a terminal pod's claims, never one still prepared.
    terminate, unprepared = keys(stage("pod-terminate")), keys(stage("pod-terminate-unprepared"))
    assert terminate[".spec.resourceClaims"] == ("DoesNotExist", ())
    assert terminate[".status.extendedResourceClaimStatus"] == ("DoesNotExist", ())
    assert unprepared['.metadata.annotations["fakeplugin.dev/unprepared"]'] == ("In", ("true",))
    assert unprepared[".status.phase"] == ("NotIn", ("Succeeded", "Failed"))
    assert stage("pod-terminate-unprepared")["spec"]["next"] == stage("pod-terminate")["spec"]["next"]


def test_an_annotated_running_pod_completes_after_its_delay_and_is_then_unprepared() -> None:
    complete = stage("pod-complete")
    assert keys(complete)['.metadata.annotations["fakeplugin.dev/complete-after"]'] == ("Exists", ())
    assert keys(complete)[".status.phase"] == ("In", ("Running",))
    assert complete["spec"]["delay"]["durationFrom"] == {
        "expressionFrom": '.metadata.annotations["fakeplugin.dev/complete-after"]'
    }
    template = complete["spec"]["next"]["statusTemplate"]
    assert "phase: Succeeded" in template and "reason: Completed" in template
    ended = {"metadata": {"annotations": {}}, "status": {"phase": "Succeeded"}}
    assert kubelet._wants_work(ended)  # its claims are unprepared, as a kubelet does for an ended pod
    ended["metadata"]["annotations"][stages.UNPREPARED] = "true"
    assert not kubelet._wants_work(ended)


def test_kwok_config_file_is_the_configuration_then_the_stages() -> None:
    docs = list(yaml.safe_load_all(stages.kwok_config_yaml()))
    assert docs[0]["kind"] == "KwokConfiguration"
    assert docs[0]["options"]["podPlayStageParallelism"] == stages.PARALLELISM
    assert [d["metadata"]["name"] for d in docs[1:]] == [
        "node-ready",
        "pod-ready",
        "pod-ready-prepared",
        "pod-complete",
        "pod-terminate",
        "pod-terminate-unprepared",
        "pod-delete",
        "pod-delete-unprepared",
    ]
    assert docs[1:] == stages.kwok_stages()


def pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {
            "resourceClaims": [
                {"name": "shared", "resourceClaimName": "big-claim"},
                {"name": "mine", "resourceClaimTemplateName": "t"},
            ],
            "containers": [
                {"name": "a", "resources": {"claims": [{"name": "shared", "request": "first"}]}},
                {"name": "b", "resources": {"claims": [{"name": "shared"}, {"name": "mine"}]}},
                {"name": "c"},
            ],
        },
        "status": status,
    }


def device(name: str, *requests: str) -> PreparedDevice:
    return PreparedDevice("n", name, tuple(requests), (f"k8s.gpu.nvidia.com/claim=x-{name}",))


def test_pod_claims_resolve_templates_and_wait_for_ungenerated_ones() -> None:
    assert podclaims.pod_claims(pod()) == podclaims.PodClaims({"shared": "big-claim"}, ("mine",))
    generated = pod(resourceClaimStatuses=[{"name": "mine", "resourceClaimName": "p-mine-x7"}])
    assert podclaims.pod_claims(generated).names == {"shared": "big-claim", "mine": "p-mine-x7"}
    none_needed = pod(resourceClaimStatuses=[{"name": "mine"}])  # the template made no claim
    assert podclaims.pod_claims(none_needed) == podclaims.PodClaims({"shared": "big-claim"})
    extended = pod(extendedResourceClaimStatus={"resourceClaimName": "p-extended-1"})
    assert podclaims.pod_claims(extended).names[podclaims.EXTENDED] == "p-extended-1"


def test_each_container_gets_the_devices_of_the_requests_it_names() -> None:
    p = pod(resourceClaimStatuses=[{"name": "mine", "resourceClaimName": "p-mine-x7"}])
    results = {
        "big-claim": PrepareResult(
            (device("gpu-0", "first"), device("gpu-1", "second/sub"), device("gpu-2"))
        ),
        "p-mine-x7": PrepareResult((device("gpu-3", "gpu"),)),
    }
    by_container = {
        c["name"]: podclaims.container_cdi_devices(p, c, results) for c in p["spec"]["containers"]
    }
    # A request names its devices, and devices without request names go to every container of the claim.
    assert by_container["a"] == ["k8s.gpu.nvidia.com/claim=x-gpu-0", "k8s.gpu.nvidia.com/claim=x-gpu-2"]
    assert by_container["b"] == [f"k8s.gpu.nvidia.com/claim=x-gpu-{i}" for i in range(4)]
    assert by_container["c"] == []


def test_extended_resource_containers_follow_the_request_mappings() -> None:
    p = pod(
        extendedResourceClaimStatus={
            "resourceClaimName": "p-ext",
            "requestMappings": [
                {"containerName": "c", "resourceName": "nvidia.com/gpu", "requestName": "req-0"}
            ],
        }
    )
    results = {"p-ext": PrepareResult((device("gpu-5", "req-0"),))}
    assert podclaims.container_cdi_devices(p, p["spec"]["containers"][2], results) == [
        "k8s.gpu.nvidia.com/claim=x-gpu-5"
    ]


def test_the_failure_event_is_the_kubelet_s_text() -> None:
    assert podclaims.prepare_failed_message("c1", "boom") == (
        "Failed to prepare dynamic resources: prepare dynamic resources: "
        "NodePrepareResources failed for ResourceClaim c1: boom"
    )


def test_cdi_resolution_applies_spec_edits_once_and_later_env_wins(tmp_path: Path) -> None:
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.nvidia.com/claim",
        "containerEdits": {"env": ["SHARED=1", "MODE=spec"]},
        "devices": [
            {
                "name": "u-gpu-0",
                "containerEdits": {
                    "env": ["MODE=gpu-0"],
                    "mounts": [{"hostPath": "/h/0", "containerPath": "/c/0", "options": ["ro"]}],
                },
            },
            {"name": "u-gpu-1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}},
        ],
    }
    (tmp_path / "k8s.gpu.nvidia.com-claim_u.yaml").write_text(yaml.safe_dump(spec))
    env, mounts, nodes, errors = resolve(
        [
            "k8s.gpu.nvidia.com/claim=u-gpu-0",
            "k8s.gpu.nvidia.com/claim=u-gpu-1",
            "k8s.gpu.nvidia.com/claim=gone",
        ],
        ["MODE=container", "KEEP=yes"],
        tmp_path,
    )
    assert env == ["MODE=gpu-0", "KEEP=yes", "SHARED=1"]
    assert mounts == [{"destination": "/c/0", "type": "bind", "source": "/h/0", "options": ["ro"]}]
    assert nodes == [{"path": "/dev/nvidia1"}]
    assert errors == ["unresolvable CDI devices k8s.gpu.nvidia.com/claim=gone"]


def test_cdi_resolution_reads_only_the_specs_naming_a_device_asked_for(tmp_path: Path) -> None:
    def spec(kind: str, *names: str) -> str:
        return yaml.safe_dump({"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": n} for n in names]})

    (tmp_path / "k8s.gpu.nvidia.com-claim_u.yaml").write_text(spec("k8s.gpu.nvidia.com/claim", "u-gpu-0"))
    (tmp_path / "k8s.gpu.nvidia.com-claim_v.yaml").write_text(spec("k8s.gpu.nvidia.com/claim", "v-gpu-1"))
    (tmp_path / "other.json").write_text(
        json.dumps({"kind": "example.com/x", "devices": [{"name": "u-gpu-0"}]})
    )
    assert sorted(load_devices(tmp_path, {"u-gpu-0"})) == [
        "example.com/x=u-gpu-0",
        "k8s.gpu.nvidia.com/claim=u-gpu-0",
    ]
    assert sorted(load_devices(tmp_path)) == [
        "example.com/x=u-gpu-0",
        "k8s.gpu.nvidia.com/claim=u-gpu-0",
        "k8s.gpu.nvidia.com/claim=v-gpu-1",
    ]


def test_one_inventory_file_serves_many_nodes(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"

    def write(count: int) -> None:
        entry = {
            "namePrefix": "h-",
            "replicas": 3,
            "kubelet": False,
            "gpus": [{"profile": "t4", "count": count}],
        }
        path.write_text(
            yaml.safe_dump({"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [entry]})
        )

    write(1)
    source = InventoryFile(path)
    nodes = [NodeDevices(source, f"h-{i}", driver=DRIVER) for i in range(3)]
    assert [len(n) for n in nodes] == [1, 1, 1]
    write(2)
    assert source.reload_if_changed() is True
    assert source.reload_if_changed() is False  # read once for all of them
    assert [n.refresh() for n in nodes] == [True, True, True]
    assert [sorted(n) for n in nodes] == [["gpu-0", "gpu-1"]] * 3
    assert nodes[0]["gpu-0"].uuid != nodes[1]["gpu-0"].uuid  # each node its own devices
    path.write_text("nodes: [")  # a broken edit changes nothing
    assert source.reload_if_changed() is False
    assert [n.refresh() for n in nodes] == [False, False, False]


class _Plugin:
    """A driver on one node that prepares every claim with one device named after the driver."""

    def __init__(self, driver: str) -> None:
        self.driver = driver
        self.calls: list[list[str]] = []
        self.prepared: list[ClaimRef] = []

    def prepare(self, claims: Sequence[Claim]) -> dict[str, PrepareResult]:
        refs = [c.ref for c in claims]
        self.calls.append([r.name for r in refs])
        self.prepared += refs
        cdi = f"k8s.{self.driver}/claim={self.driver}"
        return {
            r.uid: PrepareResult((PreparedDevice("n", self.driver, (), (f"{cdi}-{r.uid}",)),)) for r in refs
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.calls.append([f"-{c.name}" for c in claims])
        self.prepared = [c for c in self.prepared if c not in claims]
        return {c.uid: "" for c in claims}

    def prepared_claims(self) -> list[ClaimRef]:
        return list(self.prepared)


class _Api:
    """The fleet's API calls, answered from dicts."""

    def __init__(self, claims: dict[str, dict[str, Any]]) -> None:
        self.claims, self.annotated, self.events = claims, [], []  # type: ignore[var-annotated]

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self.claims[name]

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.annotated.append((name, annotations))

    def pod_event(self, pod: dict[str, Any], *, node: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def allocated_claim(name: str, *drivers: str) -> dict[str, Any]:
    results = [
        {"driver": d, "pool": "n", "device": f"dev-{i}", "request": "r"} for i, d in enumerate(drivers)
    ]
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"allocation": {"devices": {"results": results}}, "reservedFor": [{"uid": "u"}]},
    }


def two_claim_pod() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {
            "nodeName": "n",
            "resourceClaims": [
                {"name": "gpus", "resourceClaimName": "gpus"},
                {"name": "channel", "resourceClaimName": "channel"},
            ],
            "containers": [{"name": "w", "resources": {"claims": [{"name": "gpus"}, {"name": "channel"}]}}],
        },
    }


def test_each_driver_prepares_its_own_claims_in_one_call(tmp_path: Path) -> None:
    gpu, cd = _Plugin("gpu.nvidia.com"), _Plugin("compute-domain.nvidia.com")
    kube = _Api(
        {
            "gpus": allocated_claim("gpus", "gpu.nvidia.com", "gpu.nvidia.com"),
            "channel": allocated_claim("channel", "compute-domain.nvidia.com"),
        }
    )
    dra = PodDRA(
        kube,  # type: ignore[arg-type]
        plugins=lambda node: {"gpu.nvidia.com": gpu, "compute-domain.nvidia.com": cd},  # type: ignore[dict-item]
        containers_dir=lambda node: tmp_path / "containers",
        cdi_root=lambda node: tmp_path / "cdi",
    )
    assert dra.prepare(two_claim_pod())
    assert (gpu.calls, cd.calls) == ([["gpus"]], [["channel"]])
    record = json.loads((tmp_path / "containers" / record_name("ns", "p", "w")).read_text())
    assert record["cdiDevices"] == [
        "k8s.gpu.nvidia.com/claim=gpu.nvidia.com-uid-gpus",
        "k8s.compute-domain.nvidia.com/claim=compute-domain.nvidia.com-uid-channel",
    ]
    assert kube.annotated == [("p", {stages.PREPARED: "true"})]

    assert dra.unprepare({**two_claim_pod(), "gone": True}, set())
    assert (gpu.calls[-1], cd.calls[-1]) == (["-gpus"], ["-channel"])


def test_a_claim_of_a_driver_the_node_does_not_run_fails_as_the_kubelet_says(tmp_path: Path) -> None:
    gpu = _Plugin("gpu.nvidia.com")
    kube = _Api(
        {
            "gpus": allocated_claim("gpus", "gpu.nvidia.com"),
            "channel": allocated_claim("channel", "compute-domain.nvidia.com"),
        }
    )
    dra = PodDRA(
        kube,  # type: ignore[arg-type]
        plugins=lambda node: {"gpu.nvidia.com": gpu},  # type: ignore[dict-item]
        containers_dir=lambda node: tmp_path / "containers",
        cdi_root=lambda node: tmp_path / "cdi",
    )
    assert not dra.prepare(two_claim_pod())
    assert kube.events == [
        (
            "FailedPrepareDynamicResources",
            "Failed to prepare dynamic resources: prepare dynamic resources: "
            "DRA driver compute-domain.nvidia.com is not registered",
        )
    ]
    assert gpu.calls == [] and kube.annotated == []


# -- the reconcile loop (fleet.reconcile): what the kubelet's reconcileLoop would unprepare ------------------


def bound_pod(name: str, *claims: str, node: str = "n", **meta: Any) -> dict[str, Any]:
    """A pod of namespace ns bound to `node`, using the ResourceClaims `claims` by name."""
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}", **meta},
        "spec": {
            "nodeName": node,
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            "containers": [{"name": "ctr", "resources": {"claims": [{"name": c} for c in claims]}}],
        },
        "status": {"phase": "Running"},
    }


def ref(name: str, namespace: str = "ns") -> ClaimRef:
    return ClaimRef(namespace, f"uid-{name}", name)


def test_a_prepared_claim_is_stale_once_no_active_pod_of_the_node_uses_it() -> None:
    prepared = [ref("a"), ref("b"), ref("shared"), ref("a", "other-ns"), ref("done"), ref("ended")]
    pods = [
        bound_pod("p1", "a", "shared"),
        {**bound_pod("p2", "b", "shared"), "gone": True},  # force-deleted: its own claim goes
        bound_pod(
            "p3",
            "done",
            deletionTimestamp="2026-01-01T00:00:00Z",
            annotations={stages.UNPREPARED: "true"},
        ),
        {**bound_pod("p4", "ended"), "status": {"phase": "Succeeded"}},  # not active (GetActivePods)
    ]
    uids = {r.uid for r in prepared}
    stale = reconcile.stale_claims(prepared, pods, uids)
    assert stale == [ref("b"), ref("a", "other-ns"), ref("done"), ref("ended")]
    # A pod that is deleting but not unprepared yet still holds its claims: its own worker unprepares.
    deleting = bound_pod("p5", "b", deletionTimestamp="2026-01-01T00:00:00Z")
    assert reconcile.stale_claims([ref("b")], [deleting], uids) == []


def test_a_claim_that_is_gone_is_stale_even_while_its_pod_lingers() -> None:
    prepared = [ref("a"), ref("b")]
    pods = [bound_pod("p1", "a", "b")]
    assert reconcile.stale_claims(prepared, pods, {"uid-a"}) == [ref("b")]  # b deleted (or re-created)
    assert reconcile.stale_claims(prepared, pods, {"uid-a", "uid-b"}) == []


def test_container_records_of_pods_the_node_no_longer_has_are_stale() -> None:
    kept, old, gone = (record_name("ns", p, "ctr") for p in ("p1", "old", "p2"))
    pods = [bound_pod("p1", "a"), {**bound_pod("p2", "b"), "gone": True}]
    names = [kept, old, gone, "ns_p1_ctr.json.tmp"]  # a temp file is the atomic writer's, not a record
    assert reconcile.stale_records(names, pods) == sorted([old, gone])


class _ClaimsApi:
    def __init__(self, uids: set[str], nodes: frozenset[str] = frozenset()) -> None:
        self.uids = uids
        self.nodes = nodes  # the Node objects that exist
        self.lists = 0

    def claim_uids(self) -> set[str]:
        self.lists += 1
        return set(self.uids)

    def node_names(self) -> set[str]:
        return set(self.nodes)


def fleet_reconciler(
    tmp_path: Path,
    plugins: dict[str, dict[str, _Plugin]],
    pods: dict[str, list[dict[str, Any]]],
    api: Any,
    owns: Callable[[str], bool] = lambda node: True,
) -> tuple[reconcile.Reconciler, FleetDirs]:
    dirs = FleetDirs(tmp_path)
    for node, by_driver in plugins.items():
        for driver in by_driver:
            dirs.plugin(node, driver).mkdir(parents=True)
    return (
        reconcile.Reconciler(
            api,
            served=lambda: set(plugins),
            plugins=lambda node: plugins.get(node, {}),  # type: ignore[arg-type,return-value]
            pods_on=lambda node: pods.get(node, []),
            forget=lambda node: plugins.pop(node, None),  # type: ignore[arg-type,func-returns-value]
            owns=owns,
            dirs=dirs,
        ),
        dirs,
    )


def test_a_pass_unprepares_what_no_pod_uses_and_removes_the_files_of_gone_pods_and_nodes(
    tmp_path: Path,
) -> None:
    gpu, cd, idle = _Plugin("gpu.nvidia.com"), _Plugin("compute-domain.nvidia.com"), _Plugin("gpu.nvidia.com")
    gpu.prepared = [ref("kept"), ref("orphan"), ref("deleted-claim")]
    cd.prepared = [ref("channel")]
    plugins = {
        "n": {"gpu.nvidia.com": gpu, "compute-domain.nvidia.com": cd},
        "quiet": {"gpu.nvidia.com": idle},
    }
    pods = {"n": [bound_pod("p1", "kept", "deleted-claim")]}
    api = _ClaimsApi({"uid-kept", "uid-orphan", "uid-channel"})
    reconciler, dirs = fleet_reconciler(tmp_path, plugins, pods, api)
    dirs.containers("n").mkdir(parents=True)
    for pod_name in ("p1", "gone"):
        (dirs.containers("n") / record_name("ns", pod_name, "ctr")).write_text("{}")
    dirs.plugin("deleted-node", "gpu.nvidia.com").mkdir(parents=True)  # a simulated node deleted
    (dirs.cdi("deleted-node")).mkdir()
    kubelet_node = dirs.node("kubelet-1")  # a local cluster's kubelet node: no plugins/ of the fleet
    kubelet_node.mkdir()

    done = reconciler.once()
    assert done == reconcile.Pass(unprepared=3, records=1, nodes=1)
    assert gpu.prepared == [ref("kept")] and cd.prepared == []
    assert sorted(gpu.calls[-1]) == ["-deleted-claim", "-orphan"] and cd.calls == [["-channel"]]
    assert idle.calls == []  # nothing prepared there: no unprepare call
    assert sorted(p.name for p in dirs.containers("n").iterdir()) == [record_name("ns", "p1", "ctr")]
    assert not dirs.node("deleted-node").exists() and kubelet_node.is_dir()
    assert api.lists == 1  # one list of the claims per pass

    assert reconciler.once() == reconcile.Pass()  # nothing left to do
    assert gpu.prepared == [ref("kept")]


def test_a_node_another_fleet_serves_keeps_its_files(tmp_path: Path) -> None:
    """Shards share the state dir: a node not served here is gone only once its Node is, and only the
    shard that owns it removes its files."""
    api = _ClaimsApi(set(), nodes=frozenset({"other-shard"}))
    reconciler, dirs = fleet_reconciler(tmp_path, {}, {}, api, owns=lambda node: node != "not-mine")
    for node in ("other-shard", "not-mine", "deleted"):
        dirs.plugin(node, "gpu.nvidia.com").mkdir(parents=True)
    assert reconciler.once() == reconcile.Pass(nodes=1)
    assert [dirs.node(n).is_dir() for n in ("other-shard", "not-mine", "deleted")] == [True, True, False]


def test_a_pass_lists_no_claims_when_nothing_is_prepared(tmp_path: Path) -> None:
    api = _ClaimsApi(set())
    reconciler, _ = fleet_reconciler(tmp_path, {"n": {"gpu.nvidia.com": _Plugin("gpu.nvidia.com")}}, {}, api)
    assert reconciler.once() == reconcile.Pass() and api.lists == 0


class _NoApi:
    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        pass


def test_the_pod_watch_keeps_nothing_of_a_pod_once_it_is_unprepared(tmp_path: Path) -> None:
    dra = PodDRA(
        _NoApi(),  # type: ignore[arg-type]
        plugins=lambda node: {"gpu.nvidia.com": _Plugin("gpu.nvidia.com")},  # type: ignore[dict-item]
        containers_dir=lambda node: tmp_path / "containers",
        cdi_root=lambda node: tmp_path / "cdi",
    )
    kubelet = FleetKubelet(_NoApi(), dra, threads=1)  # type: ignore[arg-type]
    running = bound_pod("p1", "a", annotations={stages.PREPARED: "true"})
    kubelet._seen(running)
    assert [p["metadata"]["name"] for p in kubelet.pods_on("n")] == ["p1"]
    # kwok deletes it only after this: the pod's last events must not bring it back
    unprepared = bound_pod(
        "p1",
        "a",
        deletionTimestamp="2026-01-01T00:00:00Z",
        annotations={stages.PREPARED: "true", stages.UNPREPARED: "true"},
    )
    kubelet._seen(unprepared)
    assert kubelet.pods_on("n") == [] and kubelet._pods == {} and kubelet._on_node == {}
    kubelet._gone(unprepared)
    assert kubelet._pods == {} and kubelet._queued == set()


def test_the_pod_watch_decodes_only_events_that_may_change_what_it_does(tmp_path: Path) -> None:
    dra = PodDRA(
        _NoApi(),  # type: ignore[arg-type]
        plugins=lambda node: {"gpu.nvidia.com": _Plugin("gpu.nvidia.com")} if node == "n" else {},  # type: ignore[dict-item]
        containers_dir=lambda node: tmp_path / "containers",
        cdi_root=lambda node: tmp_path / "cdi",
    )
    may_matter = FleetKubelet(_NoApi(), dra, threads=1)._may_matter  # type: ignore[arg-type]

    def line(kind: str, pod: dict[str, Any]) -> str:  # as the API server writes a watch event
        annotation = {"last-applied": json.dumps(pod)}  # the same fields, escaped, in an annotation
        pod = {**pod, "metadata": {**pod["metadata"], "annotations": annotation}}
        return json.dumps({"type": kind, "object": pod}, separators=(",", ":"))

    ours, other = bound_pod("p1", "a"), bound_pod("p2", "a", node="m")
    unbound = {**ours, "spec": {k: v for k, v in ours["spec"].items() if k != "nodeName"}}
    claimless = {**ours, "spec": {k: v for k, v in ours["spec"].items() if k != "resourceClaims"}}
    extended = {**claimless, "status": {"extendedResourceClaimStatus": {"resourceClaimName": "x"}}}
    assert may_matter(line("MODIFIED", ours)) and may_matter(line("ADDED", extended))
    assert not may_matter(line("MODIFIED", other)) and not may_matter(line("ADDED", unbound))
    assert not may_matter(line("MODIFIED", claimless)) and not may_matter(line("DELETED", claimless))
    assert may_matter(line("DELETED", other))  # a pod it knows, of a node since gone
    assert may_matter('{"type":"ERROR","object":{"kind":"Status","code":410}}')
    assert may_matter('{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}')
