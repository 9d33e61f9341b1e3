"""The Helm chart's ComputeDomain side (resources.computeDomains.enabled): its render, CRDs and
DeviceClasses, the plugin and controller containers as fakeplugin parses them, each component's RBAC
against tests/harness/rbac.py's tables, and binding conditions (resources.computeDomains.bindingConditions).
Rendered with the helm of hack/build-k8s.sh, as tests/test_chart.py does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakeplugin import featuregates
from fakeplugin.apis import computedomain as cd_api
from fakeplugin.commands import computedomaincontroller, plugin_driver_name
from fakeplugin.drivers.computedomain.controller import objects as cd_objects
from fakeplugin.drivers.computedomain.deviceclasses import device_classes as cd_device_classes
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from tests.harness import chart
from tests.harness.chart import (
    CD_CASES,
    CHART,
    FLEET_CASES,
    KINDS,
    NAMESPACE,
    RELEASE,
    _env_vars,
    cd_render,
    containers,
    empty_or_null_fields,
    env_of,
    granted,
    named,
    objects,
    only,
    parse_with_env,
    render,
)
from tests.harness.paths import REPO
from tests.harness.rbac import (
    CONTROLLER_BINDING_CONDITIONS_CALLS,
    CONTROLLER_CALLS,
    DAEMON_CALLS,
    KUBELET_PLUGIN_CALLS,
)

pytestmark = pytest.mark.build  # helm, from hack/build-k8s.sh


helm = chart.helm  # the fixture, module-scoped: one lookup per module


# -- the ComputeDomain side (resources.computeDomains.enabled) ------------------------------------------

CD_KINDS = sorted(
    [
        *KINDS,
        *["CustomResourceDefinition"] * 2,
        *["DeviceClass"] * 2,
        "Deployment",
        *["ServiceAccount"] * 2,  # the controller's, the daemons'
        *["ClusterRole", "ClusterRoleBinding"] * 3,  # controller, daemon, the plugin's compute-domains part
        *["Role", "RoleBinding"] * 3,
    ]
)


@pytest.mark.parametrize("case", CD_CASES)
def test_compute_domain_render_is_complete_and_clean(helm: Path, case: str) -> None:
    objs = objects(render(helm, *CD_CASES[case]))
    assert sorted(o["kind"] for o in objs) == CD_KINDS
    for obj in objs:
        if obj["kind"] != "CustomResourceDefinition":  # ours as shipped (`status: {}` is a subresource)
            assert empty_or_null_fields(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


def test_compute_domains_off_by_default(helm: Path) -> None:
    text = render(helm)
    assert "compute-domain" not in text and "resource.nvidia.com" not in text
    assert list(containers(objects(text), "DaemonSet")) == ["gpus"]


def test_compute_domain_crds_are_the_packages(helm: Path) -> None:
    """The chart's copies (files/computedomain-crds/) are byte for byte fakeplugin's package data, and the
    render is exactly those objects."""
    package = REPO / "fakeplugin" / "apis" / "crds"
    copies = CHART / "files" / "computedomain-crds"
    assert sorted(p.name for p in copies.iterdir()) == sorted(p.name for p in package.glob("*.yaml"))
    for path in package.glob("*.yaml"):
        assert (copies / path.name).read_bytes() == path.read_bytes(), (
            f"cp {path.relative_to(REPO)} {copies.relative_to(REPO)}/"
        )
    rendered = [o for o in cd_render(helm) if o["kind"] == "CustomResourceDefinition"]
    assert rendered == cd_api.crds()


def test_compute_domain_device_classes_equal_fakeplugins(helm: Path) -> None:
    objs = cd_render(helm, "--set", "driverName=gpu.fake.nvidia.com")
    rendered = [
        {**o, "metadata": {"name": o["metadata"]["name"]}}
        for o in objs
        if o["kind"] == "DeviceClass" and o["metadata"]["name"].startswith("compute-domain")
    ]
    assert rendered == cd_device_classes()
    # The GPU classes are the same as without the ComputeDomain side.
    gpu = [o for o in objs if o["kind"] == "DeviceClass" and not o["metadata"]["name"].startswith("compute")]
    assert [{**o, "metadata": {"name": o["metadata"]["name"]}} for o in gpu] == device_classes(
        "gpu.fake.nvidia.com"
    )


def test_compute_domains_container_runs_the_plugin(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = cd_render(helm)
    pod = only(objs, "DaemonSet")["spec"]["template"]["spec"]
    by_name = containers(objs, "DaemonSet")
    assert list(by_name) == ["gpus", "compute-domains"]
    cd, gpus = by_name["compute-domains"], by_name["gpus"]
    assert set(env_of(cd)) <= _env_vars("serve")
    args = parse_with_env(
        monkeypatch,
        cd,
        {"spec.nodeName": "gb200-0", "metadata.uid": "pod-uid", "metadata.namespace": NAMESPACE},
    )
    assert (args.plugin, plugin_driver_name(args)) == ("compute-domains", cd_api.DRIVER_NAME)
    assert (args.namespace, args.node_name, args.healthcheck_port) == (NAMESPACE, "gb200-0", 51515)
    assert (args.healthcheck_address, args.inventory) == ("0.0.0.0", env_of(gpus)["FAKEPLUGIN_INVENTORY"])
    for probe in ("startupProbe", "livenessProbe"):
        assert cd[probe]["grpc"] == {"port": 51515}
    # The same host directories, so both plugins register with the same kubelet and write one CDI root.
    assert cd["volumeMounts"] == gpus["volumeMounts"]
    assert {m["name"] for m in cd["volumeMounts"]} <= {v["name"] for v in pod["volumes"]}
    # The real chart's value reaches the plugin as NVIDIA's env, off by default.
    assert args.gpu_clique_label_enabled is False
    labelled = containers(
        cd_render(helm, "--set", "kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled=true"),
        "DaemonSet",
    )["compute-domains"]
    assert env_of(labelled)["GPU_CLIQUE_LABEL_ENABLED"] == "true"
    fields = {"spec.nodeName": "gb200-0", "metadata.uid": "pod-uid", "metadata.namespace": NAMESPACE}
    assert parse_with_env(monkeypatch, labelled, fields).gpu_clique_label_enabled is True


def test_controller_runs_with_nvidias_flag_values(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objs = cd_render(helm, "--set", "featureGates.ComputeDomainCliques=true")
    deployment = only(objs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert set(env_of(container)) <= _env_vars("compute-domain-controller")
    args = parse_with_env(
        monkeypatch, container, {"metadata.name": "controller-pod", "metadata.namespace": NAMESPACE}
    )
    assert args.func is computedomaincontroller.run
    assert args.namespace == NAMESPACE and args.pod_name == "controller-pod"
    assert args.image_name == container["image"] == pod_image(objs)
    assert args.leader_election_enabled is True
    assert (args.leader_election_lease_lock_name, args.leader_election_lease_lock_namespace) == (
        deployment["metadata"]["name"],
        NAMESPACE,
    )
    # NVIDIA's chart values: 15s, 10s, 2s.
    assert (
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    ) == (15.0, 10.0, 2.0)
    assert args.imex_mode == "driverManaged" and args.log_verbosity_cd_daemon == 4
    assert featuregates.parse(args.feature_gates)["ComputeDomainCliques"] is True
    assert pod["serviceAccountName"] == deployment["metadata"]["name"]
    assert deployment["spec"]["replicas"] == 1


def pod_image(objs: list[dict[str, Any]]) -> str:
    return str(containers(objs, "DaemonSet")["gpus"]["image"])


def test_controller_hands_the_pull_secrets_to_the_daemons(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objs = objects(render(helm, *CD_CASES["compute-domains-everything"]))
    [container] = only(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    args = parse_with_env(monkeypatch, container, {"metadata.name": "p", "metadata.namespace": NAMESPACE})
    assert args.cd_daemon_image_pull_secret_names == "pull-secret,other-secret"
    assert args.leader_election_enabled is False and args.leader_election_retry_period == 0.5


@pytest.mark.parametrize(
    ("component", "calls"),
    [("controller", CONTROLLER_CALLS), ("kubelet-plugin", KUBELET_PLUGIN_CALLS), ("daemon", DAEMON_CALLS)],
)
def test_compute_domain_rbac_is_exactly_the_calls(
    helm: Path, component: str, calls: set[tuple[str, ...]]
) -> None:
    objs = cd_render(helm)
    service_account = {
        "controller": only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        "kubelet-plugin": only(objs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"],
        # The name the controller's DaemonSets give their pods.
        "daemon": cd_objects.DAEMON_SERVICE_ACCOUNT,
    }[component]
    assert named(objs, "ServiceAccount", service_account)["metadata"]["namespace"] == NAMESPACE
    assert granted(objs, service_account) == calls


def test_controller_reads_and_renews_only_its_own_lease(helm: Path) -> None:
    objs = cd_render(helm)
    name = only(objs, "Deployment")["metadata"]["name"]
    lease_rules = [r for r in named(objs, "Role", name)["rules"] if r["resources"] == ["leases"]]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [name],
            "verbs": ["get", "update"],
        },
    ]
    # Every other rule names no object (resourceNames narrows the Lease only).
    roles = [o for o in objs if o["kind"] in ("Role", "ClusterRole")]
    others = [r for o in roles for r in o["rules"] if r not in lease_rules]
    assert all("resourceNames" not in r for r in others)


def test_compute_domain_rbac_leaves_the_gpu_plugins_role_unchanged(helm: Path) -> None:
    name = only(objects(render(helm)), "ClusterRole")["metadata"]["name"]
    assert named(cd_render(helm), "ClusterRole", name) == only(objects(render(helm)), "ClusterRole")


# -- binding conditions (resources.computeDomains.bindingConditions) ------------------------------------

BINDING = ("--set", "resources.computeDomains.bindingConditions=true")
CD_FIELDS = {"spec.nodeName": "gb200-0", "metadata.uid": "pod-uid", "metadata.name": "controller-pod"}


def binding_flags(monkeypatch: pytest.MonkeyPatch, objs: list[dict[str, Any]]) -> dict[str, bool]:
    """--binding-conditions as each container's fakeplugin command parses it (args and env)."""
    cds = {**containers(objs, "DaemonSet"), **containers(objs, "Deployment")}
    fields = {**CD_FIELDS, "metadata.namespace": NAMESPACE}
    flags = {}
    for name, container in cds.items():
        with monkeypatch.context() as m:
            flags[name] = parse_with_env(m, container, fields).binding_conditions
    return flags


def test_binding_conditions_are_off_by_default(helm: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for args in [(), CD_CASES["compute-domains"], FLEET_CASES["fleet"]]:
        text = render(helm, *args)
        assert "--binding-conditions" not in text and "BINDING_CONDITIONS" not in text
        assert "resourceclaims/status" not in text
    objs = cd_render(helm)
    assert binding_flags(monkeypatch, objs) == {
        "gpus": False,
        "compute-domains": False,
        "compute-domain": False,
    }
    name = only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert granted(objs, name) == CONTROLLER_CALLS


def test_binding_conditions_reach_the_plugin_and_the_controller(
    helm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One value turns the flag on in both ComputeDomain commands (the plugin's slices and the controller
    answering them agree), not in the GPU plugin; the chart's fleet never runs ComputeDomains (refused
    above), so it has none either."""
    objs = cd_render(helm, *BINDING)
    assert binding_flags(monkeypatch, objs) == {
        "gpus": False,
        "compute-domains": True,
        "compute-domain": True,
    }
    assert containers(objs, "DaemonSet")["compute-domains"]["args"] == [
        "serve",
        "--plugin",
        "compute-domains",
        "--binding-conditions",
    ]
    assert containers(objs, "Deployment")["compute-domain"]["args"] == [
        "compute-domain-controller",
        "--binding-conditions",
    ]
    # Nothing else in the render changes but the controller's ClusterRole.
    plain = cd_render(helm)
    changed = sorted((o["kind"], o["metadata"]["name"]) for o in objs if o not in plain)
    assert changed == [
        ("ClusterRole", f"{RELEASE}-controller"),
        ("DaemonSet", f"{RELEASE}-kubelet-plugin"),
        ("Deployment", f"{RELEASE}-controller"),
    ]


@pytest.mark.parametrize(
    ("component", "calls"),
    [
        ("controller", CONTROLLER_CALLS | CONTROLLER_BINDING_CONDITIONS_CALLS),
        ("kubelet-plugin", KUBELET_PLUGIN_CALLS),
        ("daemon", DAEMON_CALLS),
    ],
)
def test_binding_conditions_grant_exactly_the_controllers_extra_calls(
    helm: Path, component: str, calls: set[tuple[str, ...]]
) -> None:
    objs = cd_render(helm, *BINDING)
    service_account = {
        "controller": only(objs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"],
        "kubelet-plugin": only(objs, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"],
        "daemon": cd_objects.DAEMON_SERVICE_ACCOUNT,
    }[component]
    assert granted(objs, service_account) == calls
    assert not CONTROLLER_BINDING_CONDITIONS_CALLS & CONTROLLER_CALLS
