"""The Helm chart (charts/fakeplugin) rendered with helm (the `helm` fixture: the one hack/build-k8s.sh
builds), for tests/test_chart*.py: `render` / `refusal` (`helm template` that must pass
or fail), the golden cases' helm arguments (`CASES`, `CD_CASES`, `FLEET_CASES`), and readers of a render:
`objects`, `only`, `named`, `containers`, `plugin_container`, `env_of`, `empty_or_null_fields`, `granted`
(what the bindings grant a ServiceAccount), `parse_with_env` (a container's command line as fakeplugin
parses it in the pod), `_env_vars` (the env a command reads).
"""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.cli import build_parser
from fakeplugin.cluster import versions
from tests.harness.paths import REPO
from tests.harness.tooling import tool

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
FLEET_CASES: dict[str, tuple[str, ...]] = {
    "fleet": ("-f", "tests/golden/chart/values/fleet.yaml"),
    # The GPU Operator's exporter surface over the plugin's and the fleet's pods (gpuOperator.mode).
    "gpu-operator": (
        "-f",
        "tests/golden/chart/values/fleet.yaml",
        "--set",
        "telemetry.enabled=true,gpuOperator.mode=clusterPolicy,gpuOperator.serviceMonitor.enabled=true",
    ),
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
    """A test module's fixture (`helm = chart.helm` there): the helm of hack/build-k8s.sh, looked up once."""
    return tool("helm")


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


def _env_vars(command: str = "serve") -> set[str]:
    """Environment variables a fakeplugin command reads: `[env NAME]` in its and the global flags' help."""
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    actions = [*parser._actions, *sub.choices[command]._actions]
    return {m for a in actions for m in re.findall(r"\[env (\w+)[];]", a.help or "")}


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


def fleet_render(helm: Path, *args: str) -> list[dict[str, Any]]:
    return objects(render(helm, *FLEET_CASES["fleet"], *args))
