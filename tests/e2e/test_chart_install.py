"""End-to-end: the chart's rendered objects against the session cluster (tests/e2e/conftest.py `cluster`,
`namespace`), which accepts every object. The release gets its own driver name, so its DeviceClasses never
touch the seed lab's, and a nodeSelector no node has, so no plugin pod competes with the session's plugins.
Least privilege, on a private API server that authorizes with RBAC, is tests/e2e/test_chart_install_rbac.py's.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from typing import Any

import pytest

from tests.harness.chart import CHART
from tests.harness.chart_install import as_list, release_args, render
from tests.harness.paths import REPO
from tests.harness.tooling import tool

pytestmark = pytest.mark.cluster


def cluster_scoped(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if "namespace" not in o["metadata"]]


def test_session_cluster_accepts_every_object(cluster: Any, namespace: str) -> None:
    suffix = secrets.token_hex(3)
    objs = render(namespace, f"fp-{suffix}", f"t{suffix}.fakeplugin.test")
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=as_list(objs))
    try:
        cluster.kubectl("apply", "-f", "-", input=as_list(objs))
        for obj in objs:
            where = ["-n", namespace] if "namespace" in obj["metadata"] else []
            kind = (
                f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"
                if "/" in obj["apiVersion"]
                else obj["kind"]
            )
            got = json.loads(
                cluster.kubectl("get", kind, obj["metadata"]["name"], *where, "-o", "json").stdout
            )
            assert got["metadata"]["labels"]["app.kubernetes.io/instance"] == f"fp-{suffix}"
    finally:
        cluster.kubectl("delete", "--ignore-not-found", "-f", "-", input=as_list(cluster_scoped(objs)))


def test_an_upgrade_keeps_a_patched_extended_resource_name(cluster: Any, namespace: str) -> None:
    """KAI-Scheduler's e2e patches the GPU DeviceClass's extendedResourceName and expects it to stay: a
    `helm upgrade` of our chart must not put ours back (the template keeps the live value)."""
    suffix = secrets.token_hex(3)
    release, driver = f"fp-{suffix}", f"t{suffix}.fakeplugin.test"
    common = [str(CHART), "--kubeconfig", str(cluster.kubeconfig), *release_args(namespace, driver)]

    def helm(*args: str) -> None:
        result = subprocess.run(
            [str(tool("helm")), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stderr

    def extended_resource_name() -> str | None:
        out = cluster.kubectl("get", "deviceclass", driver, "-o", "json").stdout
        return json.loads(out)["spec"].get("extendedResourceName")

    helm("install", release, *common)
    try:
        assert extended_resource_name() == f"t{suffix}.fakeplugin.test/gpu"
        patch = {"spec": {"extendedResourceName": "example.com/gpu"}}
        cluster.kubectl("patch", "deviceclass", driver, "--type=merge", "-p", json.dumps(patch))
        helm("upgrade", release, *common)
        assert extended_resource_name() == "example.com/gpu"
    finally:
        helm("uninstall", release, "--namespace", namespace, "--kubeconfig", str(cluster.kubeconfig))
