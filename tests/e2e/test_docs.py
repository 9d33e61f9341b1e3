"""The docs' code blocks that need a cluster, run against the e2e session's (tests/e2e/conftest.py): the
call log (docs/plugin.md) and faults (docs/faults.md) on the seed lab's nodes, the builders and the attached
example of docs/testing.md: the blocks of tests.harness.docblocks.E2E.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.server.calllog import CALL_LOG_NAME
from fakeplugin.testing import FakepluginCluster
from tests.harness.docblocks import BUILDERS, CALLS, EXAMPLE, FAULTS, block, commands, run
from tests.harness.seedlab import T10

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def team_a(cluster: FakepluginCluster) -> Iterator[str]:
    """The docs' namespace team-a with their claim my-gpu, used by a running pod on the T10 node; one for
    the module (a namespace's deletion takes a while, and the docs name this one)."""
    cluster.kubectl("create", "namespace", "team-a")
    try:
        run_builders(cluster, "team-a", claim_name="my-gpu")
        yield "team-a"
    finally:
        cluster.delete_namespace("team-a")


def run_builders(cluster: FakepluginCluster, ns: str, claim_name: str = "t10") -> None:
    code = block(BUILDERS).text.replace('"t10"', f'"{claim_name}"')
    exec(compile(code, str(block(BUILDERS)), "exec"), {"cluster": cluster, "ns": ns})
    pod = cluster.wait_for_pod(ns, "trainer")
    assert pod["spec"]["nodeName"] == T10


def env(cluster: FakepluginCluster) -> dict[str, str]:
    """As a user of the local cluster: its state dir (`calls` reads it) and its kubeconfig (`fault`)."""
    return {"FAKEPLUGIN_CLUSTER_DIR": str(cluster.layout.root), "KUBECONFIG": str(cluster.kubeconfig)}


def test_the_builders_snippet_runs_a_pod_on_a_t10(cluster: FakepluginCluster, namespace: str) -> None:
    run_builders(cluster, namespace)
    assert [a.device for a in cluster.allocation(namespace, "t10")] in (["gpu-0"], ["gpu-1"])


def test_the_call_log_commands_show_the_claims_calls(
    cluster: FakepluginCluster, team_a: str, tmp_path: Path
) -> None:
    log = cluster.node_dirs(T10).plugins_dir / "gpu.nvidia.com" / CALL_LOG_NAME
    shutil.copy(log, tmp_path / "calls.jsonl")
    outputs = []
    for command in commands(block(CALLS)):
        done = run(command.line, cwd=tmp_path, env=env(cluster))
        assert done.returncode == 0, f"{command.line}: {done.stderr}"
        outputs.append(done.stdout)
    one_claim, prepares, copy = outputs
    assert "NodePrepareResources" in one_claim and "team-a/my-gpu" in one_claim
    methods = {json.loads(line)["method"] for line in prepares.splitlines()}
    assert methods == {"NodePrepareResources"}
    assert "team-a/my-gpu" in copy


def test_the_fault_commands_set_and_clear_the_annotations(cluster: FakepluginCluster, team_a: str) -> None:
    lines = commands(block(FAULTS))
    for command in lines:
        done = run(command.line, env=env(cluster))
        assert done.returncode == 0, f"{command.line}: {done.stderr}"
        if "--xid" in command.line:
            node = cluster.get("node", T10)
            assert (
                node["metadata"]["annotations"]["fakeplugin.dev/device-faults"]
                == "gpu-1=xid:79,gpu-0=gpu-lost"
            )
    claim = cluster.get("resourceclaim", "my-gpu", team_a)
    assert claim["metadata"]["annotations"]["fakeplugin.dev/prepare-fail-count"] == "2"
    assert "fakeplugin.dev/device-faults" not in cluster.get("node", T10)["metadata"].get("annotations", {})


def test_the_documented_example_passes_attached(cluster: FakepluginCluster) -> None:
    (attached,) = [c.line for c in commands(block(EXAMPLE)) if "--fakeplugin-kubeconfig" in c.line]
    default = "~/.cache/fakeplugin/cluster"
    line = attached.replace(f"{default}/admin.kubeconfig", str(cluster.kubeconfig)).replace(
        default, str(cluster.layout.root)
    )
    done = run(line + " -p no:cacheprovider -q", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout
