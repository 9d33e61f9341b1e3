"""The Helm chart (charts/fakeplugin): lint, golden renders, schema and validation refusals, and
agreement with the code it deploys (DeviceClasses, feature gates, `serve` flags, inventory format).

helm is the one hack/build-k8s.sh builds, found like the cluster binaries (TEST_ASSET_HELM wins).
Golden files: tests/golden/chart/<case>.yaml, inputs in tests/golden/chart/values/; regenerate
with UPDATE_GOLDEN=1 and review the diff. The ComputeDomain side is tests/test_chart_computedomains.py's,
fleet mode and telemetry tests/test_chart_fleet_telemetry.py's; the helpers all share
tests/harness/chart.py's.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from fakeplugin import featuregates, releases
from fakeplugin.cluster import versions
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.inventory import parse_inventory
from tests.harness import chart
from tests.harness.chart import (
    CASES,
    CD_CASES,
    CHART,
    FLEET_CASES,
    GOLDEN,
    KINDS,
    NAMESPACE,
    SEED_LAB,
    _env_vars,
    empty_or_null_fields,
    env_of,
    objects,
    only,
    plugin_container,
    refusal,
    render,
    run_helm,
    template,
)
from tests.harness.paths import REPO

pytestmark = pytest.mark.build  # helm, from hack/build-k8s.sh


helm = chart.helm  # the fixture, module-scoped: one lookup per module


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


def test_nvml_library_is_the_images_unless_turned_off(helm: Path) -> None:
    """nvml.enabled (on by default): the gpus container serves the library the image build writes."""
    [directory] = re.findall(r"image-build-steps\.sh nvml \S+ (\S+)", (REPO / "Dockerfile").read_text())
    library = env_of(plugin_container(objects(render(helm))))["FAKEPLUGIN_NVML_LIBRARY"]
    assert library == f"{directory}/libnvidia-ml.so.1"
    off = plugin_container(objects(render(helm, "--set", "nvml.enabled=false")))
    assert env_of(off)["FAKEPLUGIN_NVML_LIBRARY"] == ""  # serve --nvml-library= : no NVML
    assert "nvml" in refusal(helm, "--set", "nvml.enable=true")


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
