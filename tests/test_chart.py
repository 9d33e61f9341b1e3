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
from fakeplugin.cli import build_parser
from fakeplugin.cluster import binaries, versions
from fakeplugin.publish.deviceclasses import device_classes
from fakeplugin.publish.inventory import parse_inventory
from tests.harness.tooling import unavailable

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


@pytest.mark.parametrize("case", CASES)
def test_render_matches_golden(helm: Path, case: str) -> None:
    text = render(helm, *CASES[case])
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


@pytest.mark.parametrize("args", [(), SEED_LAB], ids=["default", "seed-lab"])
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
    ],
)
def test_schema_rejects_typos(helm: Path, setting: str, typo: str) -> None:
    assert f"additional properties '{typo}' not allowed" in refusal(helm, "--set", setting)


@pytest.mark.parametrize(
    ("args", "namespace", "message"),
    [
        (
            ("--set", "resources.computeDomains.enabled=true"),
            NAMESPACE,
            "resources.computeDomains.enabled=true: ComputeDomains (IMEX channels, driver "
            "compute-domain.nvidia.com) are not emulated by fakeplugin; "
            "set resources.computeDomains.enabled=false",
        ),
        (("--set", "resources.gpus.enabled=false"), NAMESPACE, "fakeplugin emulates GPUs only"),
        ((), "default", "refusing to install into the 'default' namespace"),
        (("--set", "inventory=null"), NAMESPACE, "inventory is empty"),
        (("--set", "driverName=GPU_nvidia"), NAMESPACE, "/driverName"),
        (("--set", "logVerbosity=loud"), NAMESPACE, "/logVerbosity"),
    ],
    ids=[
        "computeDomains",
        "no-gpus",
        "default-namespace",
        "no-inventory",
        "bad-driver-name",
        "bad-verbosity",
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
    assert "driverRelease" in refusal(helm, "--set", "driverRelease=0.5.0")


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


def _serve_env_vars() -> set[str]:
    """Environment variables `fakeplugin serve` reads: the `[env NAME]` of its and the global flags' help."""
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    actions = [*parser._actions, *sub.choices["serve"]._actions]
    return {m for a in actions for m in re.findall(r"\[env (\w+)[];]", a.help or "")}


@pytest.mark.parametrize("case", CASES)
def test_every_env_var_is_a_serve_flag(helm: Path, case: str) -> None:
    container = plugin_container(objects(render(helm, *CASES[case])))
    ours = set(env_of(container)) - {"EXTRA"}  # EXTRA: the user's own, from kubeletPlugin.containers.gpus.env
    assert ours <= _serve_env_vars()
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
