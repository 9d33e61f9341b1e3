"""The Helm chart (charts/fakeplugin): lint, golden renders, schema and validation refusals, and
agreement with the code it deploys (DeviceClasses, feature gates, `serve` flags, inventory format).

helm is the one hack/build-k8s.sh builds, found like the cluster binaries (TEST_ASSET_HELM wins).
Golden files: tests/golden/chart/<case>.yaml, inputs in tests/golden/chart/values/; regenerate
with UPDATE_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import featuregates, releases
from fakeplugin.apis import computedomain as cd_api
from fakeplugin.cli import build_parser
from fakeplugin.cluster import binaries, versions
from fakeplugin.commands import computedomaincontroller, plugin_driver_name
from fakeplugin.drivers.computedomain.controller import objects as cd_objects
from fakeplugin.drivers.computedomain.deviceclasses import device_classes as cd_device_classes
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.inventory import parse_inventory
from tests.harness.rbac import (
    CONTROLLER_BINDING_CONDITIONS_CALLS,
    CONTROLLER_CALLS,
    DAEMON_CALLS,
    FLEET_CALLS,
    FLEET_TELEMETRY_CALLS,
    KUBELET_PLUGIN_CALLS,
    KUBELET_PLUGIN_DEVICE_STATUS_CALLS,
    KUBELET_PLUGIN_TELEMETRY_CALLS,
)
from tests.harness.tooling import unavailable

pytestmark = pytest.mark.build  # helm, from hack/build-k8s.sh

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "fakeplugin"
GOLDEN = REPO / "tests" / "golden" / "chart"
NAMESPACE = "nvidia-dra-driver-gpu"
RELEASE = "fakeplugin"
SEED_LAB = ("-f", "examples/seed-lab-values.yaml", "--set-file", "inventory=examples/seed-lab.yaml")

# Golden cases: helm arguments, paths relative to the repository.
CASES: dict[str, tuple[str, ...]] = {
    "default": (),
    "seed-lab": SEED_LAB,
    "adversarial": ("-f", "tests/golden/chart/values/adversarial.yaml"),
    "empty": ("-f", "tests/golden/chart/values/empty.yaml"),
    "everything": ("-f", "tests/golden/chart/values/everything.yaml"),
}
# The ComputeDomain side on (resources.computeDomains.enabled): goldens too, but with more objects and two
# plugin containers, so not in CASES.
CD_CASES: dict[str, tuple[str, ...]] = {
    "compute-domains": ("--set", "resources.computeDomains.enabled=true"),
    "compute-domains-everything": ("-f", "tests/golden/chart/values/compute-domains-everything.yaml"),
}
# Fleet mode (fleet.enabled): goldens too, with the fleet's and kwok's objects.
FLEET_CASES: dict[str, tuple[str, ...]] = {"fleet": ("-f", "tests/golden/chart/values/fleet.yaml")}
KINDS = sorted(
    [
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "DeviceClass",
        "DeviceClass",
        "DeviceClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
)


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return binaries.find("helm")
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )


def template(helm: Path, *args: str, namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:
    # --kube-version: helm built from source defaults to v1.20, below the chart's kubeVersion.
    return run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        versions.selected(),
        *args,
    )


def render(helm: Path, *args: str) -> str:
    result = template(helm, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def refusal(helm: Path, *args: str, namespace: str = NAMESPACE) -> str:
    result = template(helm, *args, namespace=namespace)
    assert result.returncode != 0, f"rendering with {args} should fail but gave:\n{result.stdout}"
    return result.stderr


def objects(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def only(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind]
    return obj


def plugin_container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    [container] = only(objs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def empty_or_null_fields(value: Any, path: str = "") -> list[str]:
    """Paths of null values and empty maps/lists: what careless templates leave behind."""
    if value is None or value == {} or value == []:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in empty_or_null_fields(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in empty_or_null_fields(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("case", [*CASES, *CD_CASES, *FLEET_CASES])
def test_render_matches_golden(helm: Path, case: str) -> None:
    text = render(helm, *{**CASES, **CD_CASES, **FLEET_CASES}[case])
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(text)
    assert golden.is_file(), f"{golden} is missing: run with UPDATE_GOLDEN=1"
    assert text == golden.read_text(), (
        f"render differs from {golden}; if intended: UPDATE_GOLDEN=1, review the diff"
    )


@pytest.mark.parametrize("case", CASES)
def test_render_is_complete_and_clean(helm: Path, case: str) -> None:
    objs = objects(render(helm, *CASES[case]))
    assert sorted(o["kind"] for o in objs) == KINDS
    for obj in objs:
        assert empty_or_null_fields(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    inventory = only(objs, "ConfigMap")["data"]["inventory.yaml"]
    assert parse_inventory(yaml.safe_load(inventory), source=f"{case} inventory").nodes


@pytest.mark.parametrize(
    "args",
    [(), SEED_LAB, CD_CASES["compute-domains"], CD_CASES["compute-domains-everything"]],
    ids=["default", "seed-lab", "compute-domains", "compute-domains-everything"],
)
def test_lint_is_clean(helm: Path, args: tuple[str, ...]) -> None:
    result = run_helm(
        helm,
        "lint",
        str(CHART),
        "--strict",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        versions.selected(),
        *args,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("setting", "typo"),
    [
        ("kubeletPlugin.nodeSelecter.a=b", "nodeSelecter"),
        ("featureGate.TimeSlicingSettings=true", "featureGate"),
        ("resources.gpu.enabled=true", "gpu"),
        ("featureGates.TimeSlicing=true", "TimeSlicing"),
        ("kubeletPlugin.containers.gpus.healthCheckPort=1", "healthCheckPort"),
        ("kubeletPlugin.containers.computeDomains.gpuCliqueLabel=true", "gpuCliqueLabel"),
        ("controller.leaderElection.enable=true", "enable"),
        ("resources.computeDomains.imex.modes=x", "modes"),
        ("resources.computeDomains.bindingCondition=true", "bindingCondition"),
        ("telemetry.enable=true", "enable"),
        ("telemetry.service.enable=true", "enable"),
    ],
)
def test_schema_rejects_typos(helm: Path, setting: str, typo: str) -> None:
    assert f"additional properties '{typo}' not allowed" in refusal(helm, "--set", setting)


@pytest.mark.parametrize(
    ("args", "namespace", "message"),
    [
        (
            (
                "--set",
                "resources.computeDomains.enabled=true,resources.computeDomains.imex.mode=hostManaged",
            ),
            NAMESPACE,
            "resources.computeDomains.imex.mode=hostManaged: fakeplugin's kubelet plugin emulates "
            "driver-managed IMEX daemons only; set resources.computeDomains.imex.mode=driverManaged",
        ),
        (("--set", "resources.gpus.enabled=false"), NAMESPACE, "fakeplugin emulates GPUs only"),
        ((), "default", "refusing to install into the 'default' namespace"),
        (("--set", "inventory=null"), NAMESPACE, "inventory is empty"),
        (("--set", "driverName=GPU_nvidia"), NAMESPACE, "/driverName"),
        (("--set", "logVerbosity=loud"), NAMESPACE, "/logVerbosity"),
        (
            ("--set", "fleet.enabled=true,resources.computeDomains.enabled=true"),
            NAMESPACE,
            "fleet.enabled with resources.computeDomains.enabled: the chart's fleet runs gpu.nvidia.com only",
        ),
        (("--set", "fleet.shards=0"), NAMESPACE, "/fleet/shards"),
        (
            ("--set", "resources.computeDomains.bindingConditions=true"),
            NAMESPACE,
            "resources.computeDomains.bindingConditions=true needs resources.computeDomains.enabled=true",
        ),
    ],
    ids=[
        "host-managed-imex",
        "no-gpus",
        "default-namespace",
        "no-inventory",
        "bad-driver-name",
        "bad-verbosity",
        "fleet-with-compute-domains",
        "no-fleet-shards",
        "binding-conditions-without-compute-domains",
    ],
)
def test_refuses_what_the_fake_cannot_do(
    helm: Path, args: tuple[str, ...], namespace: str, message: str
) -> None:
    assert message in refusal(helm, *args, namespace=namespace)


def test_default_namespace_when_allowed(helm: Path) -> None:
    result = template(helm, "--set", "allowDefaultNamespace=true", namespace="default")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("driver", ["gpu.nvidia.com", "gpu.fake.nvidia.com", "t1.example.com"])
def test_device_classes_equal_fakeplugins(helm: Path, driver: str) -> None:
    objs = objects(render(helm, "--set", f"driverName={driver}"))
    rendered = [
        {**o, "metadata": {"name": o["metadata"]["name"]}} for o in objs if o["kind"] == "DeviceClass"
    ]
    assert rendered == device_classes(driver)
    assert env_of(plugin_container(objs))["DRIVER_NAME"] == driver


def test_seed_lab_device_classes_are_the_real_drivers(helm: Path) -> None:
    objs = objects(render(helm, *SEED_LAB))
    classes = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "DeviceClass"}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}
    assert classes["gpu.nvidia.com"] == {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ],
        "extendedResourceName": "nvidia.com/gpu",
    }


def test_feature_gates_are_the_ones_the_plugin_knows() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(schema["properties"]["featureGates"]["properties"]) == set(featuregates.KNOWN)


def test_driver_releases_are_the_ones_the_plugin_knows() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["driverRelease"]["enum"] == ["", *releases.RELEASES]


def test_the_driver_release_reaches_the_plugin(helm: Path) -> None:
    assert env_of(plugin_container(objects(render(helm))))["DRIVER_RELEASE"] == ""
    objs = objects(render(helm, "--set", "driverRelease=0.4.1"))
    assert releases.get(env_of(plugin_container(objs))["DRIVER_RELEASE"]).tag == "v0.4.1"
    objs = objects(render(helm, "--set", "driverRelease=0.5.0"))
    assert releases.get(env_of(plugin_container(objs))["DRIVER_RELEASE"]).tag == "v0.5.0"
    assert "driverRelease" in refusal(helm, "--set", "driverRelease=0.6.0")


def test_consumable_shares_reach_the_plugin_only_when_set(helm: Path) -> None:
    assert "CONSUMABLE_SHARES" not in env_of(plugin_container(objects(render(helm))))
    for value in ("memory", "4"):
        objs = objects(render(helm, "--set", f"consumableShares={value}"))
        assert env_of(plugin_container(objs))["CONSUMABLE_SHARES"] == value
    for bad in ("shared", "0", "-1"):
        assert "consumableShares" in refusal(helm, "--set-string", f"consumableShares={bad}")
    assert "consumableShares" in refusal(helm, "--set", "consumableShares=0")


def test_feature_gates_reach_the_plugin_in_its_format(helm: Path) -> None:
    objs = objects(
        render(helm, "--set", "featureGates.TimeSlicingSettings=true,featureGates.MPSSupport=false")
    )
    value = env_of(plugin_container(objs))["FEATURE_GATES"]
    assert value == "MPSSupport=false,TimeSlicingSettings=true"
    gates = featuregates.parse(value)
    assert gates["TimeSlicingSettings"] is True and gates["MPSSupport"] is False


def _env_vars(command: str = "serve") -> set[str]:
    """Environment variables a fakeplugin command reads: `[env NAME]` in its and the global flags' help."""
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    actions = [*parser._actions, *sub.choices[command]._actions]
    return {m for a in actions for m in re.findall(r"\[env (\w+)[];]", a.help or "")}


@pytest.mark.parametrize("case", CASES)
def test_every_env_var_is_a_serve_flag(helm: Path, case: str) -> None:
    container = plugin_container(objects(render(helm, *CASES[case])))
    ours = set(env_of(container)) - {"EXTRA"}  # EXTRA: the user's own, from kubeletPlugin.containers.gpus.env
    assert ours <= _env_vars()
    assert container["args"] == ["serve"]


def test_daemonset_runs_the_plugin_like_the_real_one(helm: Path) -> None:
    objs = objects(render(helm, *SEED_LAB))
    ds = only(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = plugin_container(objs)
    env = env_of(container)
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"] == {"nvidia.com/dra-kubelet-plugin": "true"}
    assert pod["serviceAccountName"] == only(objs, "ServiceAccount")["metadata"]["name"]
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert (env["HEALTHCHECK_PORT"], env["HEALTHCHECK_ADDRESS"]) == ("51516", "0.0.0.0")
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 51516}
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert set(container["resources"]) == {"requests", "limits"}

    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert host_paths == {
        "plugins-registry": env["KUBELET_REGISTRAR_DIRECTORY_PATH"],
        "plugins": env["KUBELET_PLUGINS_DIRECTORY_PATH"],
        "cdi": env["CDI_ROOT"],
    }
    for name, path in host_paths.items():
        assert mounts[name]["mountPath"] == path
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"

    # The inventory: ConfigMap key inventory.yaml, mounted where FAKEPLUGIN_INVENTORY points.
    [config_volume] = [v for v in pod["volumes"] if "configMap" in v]
    assert config_volume["configMap"]["name"] == only(objs, "ConfigMap")["metadata"]["name"]
    assert env["FAKEPLUGIN_INVENTORY"] == mounts[config_volume["name"]]["mountPath"] + "/inventory.yaml"


def test_bidirectional_propagation_only_when_privileged(helm: Path) -> None:
    container = plugin_container(
        objects(render(helm, "--set", "kubeletPlugin.containers.gpus.securityContext.privileged=false"))
    )
    [plugins] = [m for m in container["volumeMounts"] if m["name"] == "plugins"]
    assert "mountPropagation" not in plugins


def _checksum(helm: Path, *args: str) -> str:
    ds = only(objects(render(helm, *args)), "DaemonSet")
    return ds["spec"]["template"]["metadata"]["annotations"]["checksum/inventory"]


def test_inventory_change_rolls_the_pods(helm: Path) -> None:
    assert _checksum(helm, *SEED_LAB) == _checksum(helm, *SEED_LAB)
    assert _checksum(helm, *SEED_LAB) != _checksum(helm, "--set-file", "inventory=demo/kind/inventory.yaml")


def test_inventory_as_text_or_map_is_the_same(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"inventory": yaml.safe_load((REPO / "examples/seed-lab.yaml").read_text())})
    )
    as_map = only(objects(render(helm, "-f", str(values))), "ConfigMap")["data"]["inventory.yaml"]
    as_text = only(objects(render(helm, *SEED_LAB)), "ConfigMap")["data"]["inventory.yaml"]
    assert yaml.safe_load(as_map) == yaml.safe_load(as_text)
    assert (
        parse_inventory(yaml.safe_load(as_text)).node_entry("capi-dralabs-md-gput10-gzl84-f2m2d") is not None
    )


def test_demo_inventories_are_valid() -> None:
    for path in ("demo/kind/inventory.yaml", "examples/seed-lab.yaml"):
        assert parse_inventory(yaml.safe_load((REPO / path).read_text()), source=path).nodes


def test_rbac_is_exactly_the_plugins_calls(helm: Path) -> None:
    objs = objects(render(helm))
    sa = only(objs, "ServiceAccount")["metadata"]
    assert only(objs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "watch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    ]
    binding = only(objs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == only(objs, "ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": NAMESPACE}]

    policy = only(objs, "ValidatingAdmissionPolicy")
    [condition] = policy["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{NAMESPACE}:{sa["name"]}"' in condition["expression"]
    assert only(objs, "ValidatingAdmissionPolicyBinding")["spec"] == {
        "policyName": policy["metadata"]["name"],
        "validationActions": ["Deny"],
    }


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


def cd_render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return objects(render(helm, *CD_CASES["compute-domains"], *args))


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def containers(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in only(objs, kind)["spec"]["template"]["spec"]["containers"]}


def parse_with_env(
    monkeypatch: pytest.MonkeyPatch, container: dict[str, Any], fields: dict[str, str]
) -> argparse.Namespace:
    """The container's command line parsed as fakeplugin would in the pod: its env set (`fields` gives the
    values of fieldRef entries), then the args."""
    for name, value in env_of(container).items():
        if isinstance(value, dict):
            value = fields[value["fieldRef"]["fieldPath"]]
        monkeypatch.setenv(name, value)
    return build_parser().parse_args(container["args"])


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


def granted(objs: list[dict[str, Any]], service_account: str) -> set[tuple[str, ...]]:
    """(scope, apiGroup, resource, verb) the chart grants the ServiceAccount through its bindings."""
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": NAMESPACE}
    rows: set[tuple[str, ...]] = set()
    for binding in objs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in binding["subjects"]:
            continue
        role = named(objs, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        scope = "cluster" if binding["kind"] == "ClusterRoleBinding" else "namespace"
        if scope == "namespace":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == NAMESPACE
        for rule in role["rules"]:
            rows |= {
                (scope, group, resource, verb)
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for verb in rule["verbs"]
            }
    return rows


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


# -- fleet mode (fleet.enabled) -------------------------------------------------------------------------


def fleet_render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return objects(render(helm, *FLEET_CASES["fleet"], *args))


def test_fleet_is_off_by_default_and_adds_only_its_objects(helm: Path) -> None:
    default = objects(render(helm))
    assert not [o for o in default if "fleet" in o["metadata"]["name"] or "kwok" in o["metadata"]["name"]]
    fleet = fleet_render(helm)
    added = sorted(
        (o["kind"], o["metadata"]["name"])
        for o in fleet
        if (o["kind"], o["metadata"]["name"]) not in {(d["kind"], d["metadata"]["name"]) for d in default}
    )
    assert added == sorted(
        [
            *[(k, f"{RELEASE}-fleet") for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")],
            ("Deployment", f"{RELEASE}-fleet-0"),
            ("Deployment", f"{RELEASE}-fleet-1"),
            *[
                (k, f"{RELEASE}-kwok")
                for k in ("ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding")
            ],
            ("Deployment", f"{RELEASE}-kwok"),
        ]
    )
    for obj in fleet:
        assert empty_or_null_fields(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"
    no_kwok = fleet_render(helm, "--set", "fleet.kwok.enabled=false")
    assert not [o for o in no_kwok if o["metadata"]["name"].endswith("-kwok")]


def test_each_fleet_shard_runs_the_fleet_command_on_the_inventory(helm: Path) -> None:
    objs = fleet_render(helm)
    role = f"{RELEASE}-fleet"
    for shard in (0, 1):
        deployment = named(objs, "Deployment", f"{role}-{shard}")
        assert deployment["spec"]["strategy"] == {"type": "Recreate"}
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == role
        [container] = pod["containers"]
        args = build_parser().parse_args(container["args"])
        assert args.shard == f"{shard}/2"
        assert args.create_nodes == f"{NAMESPACE}.{RELEASE}"
        assert args.owner_cluster_role == role and named(objs, "ClusterRole", role)
        env = env_of(container)
        assert env["FAKEPLUGIN_INVENTORY"] == "/etc/fakeplugin/inventory.yaml"
        assert env["FAKEPLUGIN_FLEET_THREADS"] == "4" and env["EXTRA"] == "1"
        assert set(env) - {"EXTRA"} <= _env_vars("fleet")
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"inventory": "/etc/fakeplugin", "state": env["FAKEPLUGIN_FLEET_NODES_DIR"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["inventory"]["configMap"]["name"] == f"{RELEASE}-inventory"
        assert volumes["state"] == {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}}
        # Never on a simulated node.
        [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]


def test_fleet_rbac_is_exactly_the_fleets_calls(helm: Path) -> None:
    objs = fleet_render(helm)
    role = named(objs, "ClusterRole", f"{RELEASE}-fleet")
    assert granted(objs, f"{RELEASE}-fleet") == FLEET_CALLS
    [own] = [r for r in role["rules"] if r["resources"] == ["clusterroles"]]
    assert own["resourceNames"] == [role["metadata"]["name"]]


def test_kwok_runs_with_the_fleets_stages(helm: Path) -> None:
    from fakeplugin.fleet.stages import kwok_config_yaml

    assert (CHART / "files" / "kwok.yaml").read_text() == kwok_config_yaml(), (
        "charts/fakeplugin/files/kwok.yaml: regenerate with `fakeplugin fleet --print-kwok-config`"
    )
    objs = fleet_render(helm)
    config = named(objs, "ConfigMap", f"{RELEASE}-kwok")
    assert config["data"]["kwok.yaml"] == kwok_config_yaml()
    pod = named(objs, "Deployment", f"{RELEASE}-kwok")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "fakeplugin.local/kwok:v0.8.0"
    assert "--config=/etc/kwok/kwok.yaml" in container["args"]
    assert "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" in container["args"]
    assert pod["volumes"] == [{"name": "config", "configMap": {"name": f"{RELEASE}-kwok"}}]


def test_with_the_fleet_the_plugin_daemonset_stays_off_simulated_nodes(helm: Path) -> None:
    off = {"key": "type", "operator": "NotIn", "values": ["kwok"]}
    pod = only(fleet_render(helm), "DaemonSet")["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == [off]
    assert "affinity" not in only(objects(render(helm)), "DaemonSet")["spec"]["template"]["spec"]
    mine = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    kept = fleet_render(helm, "--set-json", f"kubeletPlugin.affinity={json.dumps(mine)}")
    assert only(kept, "DaemonSet")["spec"]["template"]["spec"]["affinity"] == mine  # the user's wins


# ---- telemetry (docs/prometheus.md) ------------------------------------------------------------------------


def test_telemetry_is_off_by_default(helm: Path) -> None:
    objs = objects(render(helm))
    pod = only(objs, "DaemonSet")["spec"]["template"]
    container = plugin_container(objs)
    assert [o for o in objs if o["kind"] == "Service"] == []
    assert not [k for k in pod["metadata"]["annotations"] if k.startswith("prometheus.io/")]
    assert (container["args"], container.get("ports")) == (["serve"], None)
    assert not {"FAKEPLUGIN_TELEMETRY_ENDPOINT", "DCGM_POD_RESOURCES_KUBELET_SOCKET"} & set(env_of(container))
    assert "pod-resources" not in {v["name"] for v in pod["spec"]["volumes"]}


def test_telemetry_serves_dcgm_exporters_port_with_the_annotations_prometheus_reads(helm: Path) -> None:
    objs = objects(render(helm, *SEED_LAB, "--set", "telemetry.enabled=true"))
    ds = only(objs, "DaemonSet")
    pod = ds["spec"]["template"]
    container = plugin_container(objs)
    annotations = pod["metadata"]["annotations"]
    assert {k: v for k, v in annotations.items() if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
    }
    # The plugin listens on the pod's IP, the port the annotation names; the socket is the mounted one's.
    env = env_of(container)
    assert env["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9400"
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    # The kubelet's PodResources socket, read-only, where the plugin looks for it.
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounts["pod-resources"] == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/lib/kubelet/pod-resources",
        "type": "Directory",
    }
    # The Service a ServiceMonitor selects: headless, port `metrics` of exactly the plugin pods.
    service = only(objs, "Service")
    assert service["metadata"]["name"] == f"{RELEASE}-telemetry"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == ds["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    for obj in (ds, service):
        assert empty_or_null_fields(obj) == [], obj["kind"]


def test_telemetry_port_path_and_service_follow_the_values(helm: Path) -> None:
    objs = objects(render(helm, "-f", "tests/golden/chart/values/everything.yaml"))
    pod = only(objs, "DaemonSet")["spec"]["template"]
    container = plugin_container(objs)
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "9500"
    env = env_of(container)
    assert env["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9500"
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    assert container["ports"][0]["containerPort"] == 9500
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["pod-resources"] == (
        "/var/lib/k0s/kubelet/pod-resources"
    )
    assert [o for o in objs if o["kind"] == "Service"] == []  # telemetry.service.enabled: false


def test_telemetry_grants_exactly_its_extra_calls(helm: Path) -> None:
    """The plugin's ServiceAccount gets what telemetry reads beyond Prepare (each used pod), nothing else."""
    objs = objects(render(helm, "--set", "telemetry.enabled=true"))
    name = only(objs, "ServiceAccount")["metadata"]["name"]
    plain = granted(objects(render(helm)), name)
    assert granted(objs, name) == plain | KUBELET_PLUGIN_TELEMETRY_CALLS
    assert not KUBELET_PLUGIN_TELEMETRY_CALLS & plain


def test_device_status_passes_the_flag_and_grants_exactly_its_extra_calls(
    helm: Path, monkeypatch: Any
) -> None:
    """Off by default: no flag, no grant. On: DEVICE_STATUS reaches `serve`, and the plugin's ServiceAccount
    gets the status update and the per-driver verb, for its driver name only."""
    plain = objects(render(helm))
    name = only(plain, "ServiceAccount")["metadata"]["name"]
    assert "DEVICE_STATUS" not in env_of(plugin_container(plain))
    objs = objects(render(helm, "--set", "kubeletPlugin.deviceStatus=true,driverName=gpu.example.com"))
    assert granted(objs, name) == granted(plain, name) | KUBELET_PLUGIN_DEVICE_STATUS_CALLS
    assert not KUBELET_PLUGIN_DEVICE_STATUS_CALLS & granted(plain, name)
    [driver_rule] = [
        r for r in named(objs, "ClusterRole", name)["rules"] if "resourceclaims/driver" in r["resources"]
    ]
    assert driver_rule["resourceNames"] == ["gpu.example.com"]
    container = plugin_container(objs)
    args = parse_with_env(monkeypatch, container, {"spec.nodeName": "n", "metadata.uid": "u"})
    assert args.device_status is True


def test_telemetry_in_fleet_mode_serves_every_shards_nodes(helm: Path) -> None:
    objs = fleet_render(helm, "--set", "telemetry.enabled=true,fleet.shards=2,fleet.podAnnotations.a=b")
    fleets = [
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"].startswith(f"{RELEASE}-fleet-")
    ]
    assert len(fleets) == 2
    for deployment in fleets:
        pod = deployment["spec"]["template"]
        (container,) = pod["spec"]["containers"]
        assert pod["metadata"]["annotations"] == {
            "example.com/team": "gpu-sim",  # tests/golden/chart/values/fleet.yaml's, and the one --set adds
            "a": "b",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9400",
            "prometheus.io/path": "/metrics",
        }
        assert env_of(container)["FAKEPLUGIN_TELEMETRY_ENDPOINT"] == "0.0.0.0:9400"
        assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    (name,) = {
        o["metadata"]["name"]
        for o in objs
        if o["kind"] == "ServiceAccount" and "fleet" in o["metadata"]["name"]
    }
    plain = granted(fleet_render(helm), name)
    assert granted(objs, name) == plain | FLEET_TELEMETRY_CALLS
    assert not FLEET_TELEMETRY_CALLS & plain
    # Off, the fleet's pods are as before: no port, no endpoint, no prometheus.io annotations.
    off = [o for o in fleet_render(helm) if o["kind"] == "Deployment" and "-fleet-" in o["metadata"]["name"]]
    assert off
    for deployment in off:
        assert deployment["spec"]["template"]["metadata"]["annotations"] == {"example.com/team": "gpu-sim"}
        assert "ports" not in deployment["spec"]["template"]["spec"]["containers"][0]
