"""The compute-domain controller's pure steps (drivers.computedomain.controller): the objects it makes
for a ComputeDomain, its global status, its teardown order, and leader election's decisions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fakeplugin import featuregates, releases
from fakeplugin.apis import computedomain as api
from fakeplugin.commands.computedomaincontroller import check_imex_mode, seconds
from fakeplugin.drivers.computedomain.controller import lease, objects, reconcile, status
from fakeplugin.drivers.computedomain.controller.objects import DaemonSettings
from fakeplugin.drivers.computedomain.controller.reconcile import (
    AddFinalizer,
    Create,
    Delete,
    Mode,
    Owned,
    RemoveFinalizer,
    RemoveNodeLabels,
    SetStatus,
    Wait,
)

UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
SETTINGS = DaemonSettings(
    namespace="dra-driver",
    image="fakeplugin:test",
    max_nodes_per_imex_domain=18,
    feature_gates={"IMEXDaemonsWithDNSNames": True, "ComputeDomainCliques": True},
)
MODE = Mode(daemon=SETTINGS)


def compute_domain(num_nodes: int = 0, mode: str = "Single", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "work", "uid": UID, "resourceVersion": "7", **meta},
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": mode},
        },
    }


def test_names():
    assert api.daemon_name(UID) == f"computedomain-daemon-{UID}"
    assert api.clique_name(UID, "c0ffee.3") == f"{UID}.c0ffee.3"
    assert api.FINALIZER == api.COMPUTE_DOMAIN_LABEL == "resource.nvidia.com/computeDomain"
    assert api.compute_domains_path() == "/apis/resource.nvidia.com/v1beta1/computedomains"
    assert api.cliques_path("d") == "/apis/resource.nvidia.com/v1beta1/namespaces/d/computedomaincliques"


def test_workload_template_exactly():
    assert objects.workload_template(compute_domain(mode="All")) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "namespace": "work",
            "name": "cd-channel",
            "finalizers": ["resource.nvidia.com/computeDomain"],
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "channel",
                            "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                        }
                    ],
                    "config": [
                        {
                            "requests": ["channel"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": UID,
                                    "allocationMode": "All",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def test_host_managed_workload_template_asks_for_one_channel():
    template = reconcile.workload_template(compute_domain(mode="All"), host_managed=True)
    assert (
        template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"] == "Single"
    )


def test_daemon_template_exactly():
    assert objects.daemon_template(compute_domain(), "dra-driver") == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "namespace": "dra-driver",
            "name": f"computedomain-daemon-{UID}",
            "finalizers": ["resource.nvidia.com/computeDomain"],
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Daemon",
            },
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "daemon", "exactly": {"deviceClassName": "compute-domain-daemon.nvidia.com"}}
                    ],
                    "config": [
                        {
                            "requests": ["daemon"],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": "resource.nvidia.com/v1beta1",
                                    "kind": "ComputeDomainDaemonConfig",
                                    "domainID": UID,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def test_daemon_set():
    ds = objects.daemon_set(compute_domain(), SETTINGS)
    label = {"resource.nvidia.com/computeDomain": UID}
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    assert ds["metadata"] == {
        "namespace": "dra-driver",
        "name": f"computedomain-daemon-{UID}",
        "finalizers": ["resource.nvidia.com/computeDomain"],
        "labels": label,
    }
    assert ds["spec"]["selector"] == {"matchLabels": label}
    assert ds["spec"]["template"]["metadata"] == {"labels": label}
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == label
    assert pod["serviceAccountName"] == "compute-domain-daemon-service-account"
    assert pod["tolerations"] == [
        {"operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists", "effect": "NoExecute"},
        {"operator": "Exists", "effect": "PreferNoSchedule"},
    ]
    assert pod["resourceClaims"] == [
        {"name": "compute-domain-daemon", "resourceClaimTemplateName": f"computedomain-daemon-{UID}"}
    ]
    assert "imagePullSecrets" not in pod
    (container,) = pod["containers"]
    assert container["name"] == "compute-domain-daemon"
    assert container["image"] == "fakeplugin:test"
    assert container["command"] == ["fakeplugin", "-v", "$(LOG_VERBOSITY)", "compute-domain-daemon", "run"]
    assert container["resources"] == {"claims": [{"name": "compute-domain-daemon"}]}
    # Root, as NVIDIA's image runs it: /imexd is the plugin's root-owned directory (ours runs as 65532).
    assert container["securityContext"] == {"runAsUser": 0}
    check = ["fakeplugin", "-v", "$(LOG_VERBOSITY)", "compute-domain-daemon", "check"]
    assert container["startupProbe"] == {
        "exec": {"command": check},
        "initialDelaySeconds": 0,
        "periodSeconds": 1,
        "timeoutSeconds": 10,
        "failureThreshold": 1200,
        "successThreshold": 1,
    }
    assert (container["livenessProbe"]["periodSeconds"], container["livenessProbe"]["failureThreshold"]) == (
        60,
        20,
    )
    assert (
        container["readinessProbe"]["periodSeconds"],
        container["readinessProbe"]["failureThreshold"],
    ) == (10, 1)
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env == {
        "LOG_VERBOSITY": "0",
        "MAX_NODES_PER_IMEX_DOMAIN": "18",
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_UID": {"fieldRef": {"fieldPath": "metadata.uid"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FEATURE_GATES": "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,",
    }


def test_daemon_set_pull_secrets():
    settings = DaemonSettings("ns", "img", 18, {}, image_pull_secrets=("a", "b"))
    pod = objects.daemon_set(compute_domain(), settings)["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "a"}, {"name": "b"}]
    assert "FEATURE_GATES" not in {e["name"] for e in pod["containers"][0]["env"]}


# -- reconcile -------------------------------------------------------------------------------------------


def test_new_compute_domain_gets_everything_in_nvidias_order():
    cd = compute_domain()
    actions = reconcile.plan(cd, Owned(), MODE)
    assert actions == [
        AddFinalizer(cd),
        Create(objects.daemon_template(cd, "dra-driver")),
        Create(objects.daemon_set(cd, SETTINGS)),
        Create(objects.workload_template(cd)),
        SetStatus(cd, "Ready"),  # numNodes 0, no nodes: Ready (calculateGlobalStatus)
    ]


def test_complete_compute_domain_needs_nothing():
    cd = compute_domain(finalizers=[api.FINALIZER])
    cd["status"] = {"status": "Ready"}
    owned = Owned((objects.workload_template(cd),), (), (objects.daemon_set(cd, SETTINGS),))
    # An existing DaemonSet means no daemon template is made (the DaemonSet's manager makes both).
    assert reconcile.plan(cd, owned, MODE) == []


def test_status_follows_num_nodes_on_every_pass():
    cd = compute_domain(num_nodes=2, finalizers=[api.FINALIZER])
    cd["status"] = {"status": "Ready", "nodes": [{"name": "n1", "status": "Ready"}]}
    owned = Owned((objects.workload_template(cd),), (), (objects.daemon_set(cd, SETTINGS),))
    assert reconcile.plan(cd, owned, MODE) == [SetStatus(cd, "NotReady")]


def test_host_managed_makes_only_the_workload_template():
    cd = compute_domain(num_nodes=3)
    mode = Mode(daemon=SETTINGS, host_managed=True, cliques_gate=False)
    assert reconcile.plan(cd, Owned(), mode) == [
        AddFinalizer(cd),
        Create(reconcile.workload_template(cd, host_managed=True)),
        SetStatus(cd, "Ready"),
    ]


def _owned(cd: dict[str, Any], *, marked: bool, finalized: bool = True) -> Owned:
    def mark(obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = "1"
        if marked:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        if not finalized:
            obj["metadata"]["finalizers"] = []
        return obj

    return Owned(
        (mark(objects.workload_template(cd)),),
        (mark(objects.daemon_template(cd, "dra-driver")),),
        (mark(objects.daemon_set(cd, SETTINGS)),),
    )


def test_deletion_in_nvidias_order():
    cd = compute_domain(finalizers=[api.FINALIZER], deletionTimestamp="2026-01-01T00:00:00Z")
    # Pass 1: delete templates and DaemonSet, remove node labels; their finalizers wait for the marks.
    owned = _owned(cd, marked=False)
    assert reconcile.plan(cd, owned, MODE) == [
        Delete(owned.workload_templates[0]),
        Delete(owned.daemon_templates[0]),
        Delete(owned.daemon_sets[0]),
        RemoveNodeLabels(UID),
        Wait("ResourceClaimTemplate work/cd-channel not yet marked for deletion"),
    ]
    # Pass 2: all marked: the workload template's finalizer, then wait until it is gone.
    owned = _owned(cd, marked=True)
    assert reconcile.plan(cd, owned, MODE) == [
        RemoveNodeLabels(UID),
        RemoveFinalizer(owned.workload_templates[0]),
        Wait("ResourceClaimTemplate work/cd-channel still exists"),
    ]
    # Pass 3: the workload template is gone: the daemon template's and the DaemonSet's finalizers.
    owned = Owned((), owned.daemon_templates, owned.daemon_sets)
    assert reconcile.plan(cd, owned, MODE) == [
        RemoveNodeLabels(UID),
        RemoveFinalizer(owned.daemon_templates[0]),
        RemoveFinalizer(owned.daemon_sets[0]),
        Wait(f"ResourceClaimTemplate dra-driver/computedomain-daemon-{UID} still exists"),
    ]
    # Pass 4: everything gone: last, the ComputeDomain's own finalizer.
    assert reconcile.plan(cd, Owned(), MODE) == [RemoveNodeLabels(UID), RemoveFinalizer(cd)]


def test_leftovers_of_a_gone_compute_domain_are_removed_the_same_way():
    owned = _owned(compute_domain(), marked=True, finalized=False)
    assert reconcile.teardown(UID, Owned(), None) == [RemoveNodeLabels(UID)]
    assert reconcile.teardown(UID, owned, None) == [
        RemoveNodeLabels(UID),
        Wait("ResourceClaimTemplate work/cd-channel still exists"),
    ]


# -- status ----------------------------------------------------------------------------------------------


def daemon(node: str, state: str, index: int = 0, clique: str = "uuid.1") -> dict[str, Any]:
    return {
        "nodeName": node,
        "ipAddress": f"10.0.0.{index + 1}",
        "cliqueID": clique,
        "index": index,
        "status": state,
    }


def clique(*daemons: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": f"{UID}.uuid.1",
            "namespace": "dra-driver",
            "labels": {api.COMPUTE_DOMAIN_LABEL: UID},
        },
        "daemons": list(daemons),
    }


def pod(
    node: str, ip: str = "10.1.0.1", *, clique_label: str | None = None, ready: bool = True
) -> dict[str, Any]:
    labels = {api.COMPUTE_DOMAIN_LABEL: UID}
    if clique_label is not None:
        labels[api.CLIQUE_ID_LABEL] = clique_label
    return {
        "metadata": {"name": f"daemon-{node}", "labels": labels},
        "spec": {"nodeName": node},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.mark.parametrize(
    ("num_nodes", "states", "expected"),
    [
        (1, [], "NotReady"),  # no nodes yet
        (0, [], "Ready"),  # numNodes 0: nothing to wait for (NVIDIA's rule)
        (2, ["Ready"], "NotReady"),  # fewer than numNodes
        (2, ["Ready", "NotReady"], "NotReady"),
        (2, ["Ready", "Ready"], "Ready"),
        (0, ["Ready", "NotReady"], "NotReady"),
        (1, ["Ready", "Ready"], "Ready"),  # more nodes than numNodes is fine
        (1, [""], "Ready"),  # only an explicit NotReady counts (a Go string comparison)
    ],
)
def test_global_status(num_nodes, states, expected):
    nodes = [{"name": f"n{i}", "status": s} for i, s in enumerate(states)]
    assert status.global_status(num_nodes, nodes) == expected


def test_host_managed_is_always_ready():
    assert status.global_status(5, [], host_managed=True) == "Ready"


def test_status_nodes_from_cliques_and_fabric_less_pods():
    cd = compute_domain(num_nodes=2)
    cliques = [clique(daemon("n1", "Ready", 0), daemon("n2", "NotReady", 1))]
    pods = [pod("n3", "10.9.0.3", clique_label=""), pod("n1"), pod("n4", "", clique_label="")]
    assert status.status_update(cd, cliques, pods, cliques_gate=True) == {
        "status": "NotReady",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "uuid.1", "index": 0, "status": "Ready"},
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": "uuid.1", "index": 1, "status": "NotReady"},
            # no fabric: index -1, Ready with its pod; a pod without an IP is left out
            {"name": "n3", "ipAddress": "10.9.0.3", "cliqueID": "", "index": -1, "status": "Ready"},
        ],
    }


def test_status_ready_when_every_daemon_is_ready():
    cd = compute_domain(num_nodes=2)
    cliques = [clique(daemon("n1", "Ready", 0), daemon("n2", "Ready", 1))]
    assert status.status_update(cd, cliques, [], cliques_gate=True)["status"] == "Ready"


def test_status_written_only_when_nodes_change():
    cd = compute_domain()
    cd["status"] = {
        "status": "Ready",
        "nodes": [
            {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "uuid.1", "index": 0, "status": "Ready"}
        ],
    }
    assert status.status_update(cd, [clique(daemon("n1", "Ready"))], [], cliques_gate=True) is None
    # the last daemon gone: nodes removed (omitted, as NVIDIA's omitempty), status recomputed
    cd["spec"]["numNodes"] = 1
    assert status.status_update(cd, [clique()], [], cliques_gate=True) == {
        "status": "NotReady",
        "nodes": None,
    }


def test_without_cliques_gate_fabric_nodes_survive_while_their_pod_does():
    cd = compute_domain()
    cd["status"] = {
        "status": "Ready",
        "nodes": [
            {"name": "n1", "ipAddress": "10.1.0.1", "cliqueID": "uuid.1", "index": 0, "status": "Ready"},
            {"name": "n2", "ipAddress": "10.1.0.2", "cliqueID": "uuid.1", "index": 1, "status": "Ready"},
        ],
    }
    new = status.status_update(cd, [], [pod("n1", "10.1.0.1")], cliques_gate=False)
    assert new == {"status": "Ready", "nodes": [cd["status"]["nodes"][0]]}


def test_stale_clique_entries():
    c = clique(daemon("n1", "Ready"), daemon("n2", "Ready", 1))
    assert status.stale_daemons(c, [pod("n1")]) == ["n2"]
    unscheduled = pod("n2")
    unscheduled["spec"] = {}
    assert status.stale_daemons(c, [pod("n1"), unscheduled]) == ["n2"]
    assert status.stale_daemons(c, [pod("n1"), pod("n2")]) == []


# -- leader election, flags --------------------------------------------------------------------------------

CFG = lease.LeaseConfig(namespace="d", name="dra-driver-nvidia-gpu-controller", identity="me")


def test_lease_decisions():
    assert not lease.held_by_other({}, "me", 0, 100)
    held = {"holderIdentity": "other", "leaseDurationSeconds": 15}
    assert lease.held_by_other(held, "me", observed_at=90, now=100)
    assert not lease.held_by_other(held, "me", observed_at=80, now=100)  # expired by our clock
    assert not lease.held_by_other({**held, "holderIdentity": "me"}, "me", 90, 100)


def test_lease_claims():
    first = lease.claimed({}, CFG, 0.0)
    assert first == {
        "holderIdentity": "me",
        "leaseDurationSeconds": 15,
        "acquireTime": "1970-01-01T00:00:00.000000Z",
        "renewTime": "1970-01-01T00:00:00.000000Z",
        "leaseTransitions": 0,
    }
    renewed = lease.claimed(first, CFG, 2.5)
    assert (renewed["acquireTime"], renewed["renewTime"]) == (
        first["acquireTime"],
        "1970-01-01T00:00:02.500000Z",
    )
    assert renewed["leaseTransitions"] == 0
    taken = lease.claimed({**first, "holderIdentity": "other"}, CFG, 30.0)
    assert (taken["acquireTime"], taken["leaseTransitions"]) == ("1970-01-01T00:00:30.000000Z", 1)
    assert "holderIdentity" not in lease.released(taken, 31.0)
    assert lease.released(taken, 31.0)["leaseDurationSeconds"] == 1


def test_durations():
    assert seconds("15s") == 15 and seconds("1m30s") == 90 and seconds("500ms") == 0.5 and seconds("2") == 2


def test_gates_per_release_and_imex_mode():
    for name in ("25.12", "0.4.1", "0.5.0-dev"):
        gates = releases.get(name).feature_gates
        assert gates["IMEXDaemonsWithDNSNames"] is True and gates["ComputeDomainCliques"] is True
    assert "HostManagedIMEXDaemon" not in releases.get("0.4.1").feature_gates
    dev = releases.get("0.5.0-dev")
    assert dev.feature_gates["HostManagedIMEXDaemon"] is False
    with pytest.raises(ValueError, match=r'imex\.mode="hostManaged" requires the HostManagedIMEXDaemon'):
        check_imex_mode("hostManaged", featuregates.parse("", dev), dev)
    assert check_imex_mode("hostManaged", featuregates.parse("HostManagedIMEXDaemon=true", dev), dev)
    assert not check_imex_mode("driverManaged", featuregates.parse("", dev), dev)
