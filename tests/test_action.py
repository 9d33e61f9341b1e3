"""The GitHub Action (action.yml, docs/ci.md) and its script, hack/action/run.sh, run as the runner runs it:
inputs as INPUT_* variables, outputs to $GITHUB_OUTPUT. Here every program it starts is a fake on PATH that
records its argv (fakeplugin, pip's Python, sudo, kind, helm, docker, go); the real local cluster is
tests/e2e/test_action.py's (cluster tier)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness.paths import REPO

SCRIPT = REPO / "hack" / "action" / "run.sh"
# Each fake appends `name arg...` to $CALLS; `fakeplugin cluster up` writes the state dir's kubeconfig.
FAKE = """#!/usr/bin/env bash
echo "$(basename "$0") $*" >>"$CALLS"
case "$(basename "$0") $1 $2" in
  "fakeplugin cluster up")
    while [[ $# -gt 0 && "$1" != --state-dir ]]; do shift; done
    mkdir -p "$2" && echo "apiVersion: v1 # fake" >"$2/admin.kubeconfig" ;;
  "fakeplugin --version ") echo "fakeplugin 0.2.0" ;;
esac
"""
SUDO = """#!/usr/bin/env bash
echo "sudo $*" >>"$CALLS"
while [[ "$1" == -* ]]; do shift; done
exec "$@"
"""


def run_action(
    tmp: Path, inputs: dict[str, str], *, system: str = "/usr/bin:/bin"
) -> tuple[subprocess.CompletedProcess[str], list[str], dict[str, str]]:
    """hack/action/run.sh with these inputs; its result, the calls it made, its outputs."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("fakeplugin", "python-for-pip", "kind", "helm", "docker"):
        (bin_dir / name).write_text(FAKE)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "sudo").write_text(SUDO)
    (bin_dir / "sudo").chmod(0o755)
    calls, output = tmp / "calls", tmp / "github-output"
    calls.write_text("")
    output.write_text("")
    env = {
        "PATH": f"{bin_dir}:{system}",
        "HOME": str(tmp / "home"),
        "CALLS": str(calls),
        "RUNNER_TEMP": str(tmp / "runner-temp"),
        "GITHUB_OUTPUT": str(output),
        "ACTION_PATH": str(REPO),
        "PYTHON": str(bin_dir / "python-for-pip"),
        **{f"INPUT_{k.upper().replace('-', '_')}": v for k, v in inputs.items()},
    }
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done, calls.read_text().splitlines(), outputs


def test_local_mode_installs_builds_starts_and_writes_the_kubeconfig_output(tmp_path: Path) -> None:
    done, calls, outputs = run_action(tmp_path, {"mode": "local"})
    assert done.returncode == 0, done.stderr
    work = tmp_path / "runner-temp" / "fakeplugin-action"
    up = f"fakeplugin cluster up --inventory {REPO}/examples/seed-lab.yaml --state-dir {work}/cluster"
    assert [c for c in calls if not c.startswith("sudo ")] == [
        f"python-for-pip -m pip install -q {REPO}",  # the action's own checkout
        "fakeplugin --version",
        "fakeplugin cluster build",
        up,
    ]
    assert outputs == {"state-dir": f"{work}/cluster", "kubeconfig": f"{work}/kubeconfig"}
    assert (work / "kubeconfig").read_text() == "apiVersion: v1 # fake\n"
    assert (work / "started").read_text() == f"mode=local\nstate-dir={work}/cluster\n"
    if os.geteuid() != 0:  # as another user, `cluster up` (root's) and reading its kubeconfig go through sudo
        assert [c for c in calls if c.startswith("sudo ")] == [
            f"sudo --preserve-env env PATH={tmp_path}/bin:/usr/bin:/bin {up}",
            f"sudo --preserve-env env PATH={tmp_path}/bin:/usr/bin:/bin cat {work}/cluster/admin.kubeconfig",
        ]


def test_local_mode_passes_the_version_inventory_and_add_ons(tmp_path: Path) -> None:
    inventory = tmp_path / "mine.yaml"
    inventory.write_text("nodes: []\n")
    done, calls, _ = run_action(
        tmp_path,
        {
            "inventory": str(inventory),
            "kubernetes-version": "1.35.4",
            "with": "kueue,karpenter=pools.yaml",
            "fakeplugin-version": "0.2.0",
        },
    )
    assert done.returncode == 0, done.stderr
    mine = [c for c in calls if not c.startswith("sudo ")]
    assert mine[0] == "python-for-pip -m pip install -q fakeplugin==0.2.0"
    assert "fakeplugin cluster build --kubernetes-version v1.35.4" in mine
    assert "fakeplugin cluster build --kubernetes-version v1.35.4 --only kueue,karpenter" in mine
    (up,) = [c for c in mine if c.startswith("fakeplugin cluster up")]
    assert up.endswith(
        f"--inventory {inventory} --state-dir {tmp_path}/runner-temp/fakeplugin-action/cluster "
        "--kubernetes-version v1.35.4 --with kueue,karpenter=pools.yaml"
    )


def test_any_other_fakeplugin_version_is_a_pip_requirement_as_it_is(tmp_path: Path) -> None:
    spec = "fakeplugin @ git+https://example.invalid/fakeplugin@main"
    done, calls, _ = run_action(tmp_path, {"fakeplugin-version": spec})
    assert done.returncode == 0, done.stderr
    assert calls[0] == f"python-for-pip -m pip install -q {spec}"


def test_down_takes_down_what_up_started_then_nothing(tmp_path: Path) -> None:
    assert run_action(tmp_path, {})[0].returncode == 0
    done, calls, outputs = run_action(tmp_path, {"mode": "down"})
    assert done.returncode == 0, done.stderr
    state = tmp_path / "runner-temp" / "fakeplugin-action" / "cluster"
    assert [c for c in calls if not c.startswith("sudo ")] == [f"fakeplugin cluster down --state-dir {state}"]
    assert outputs == {}
    again, calls, _ = run_action(tmp_path, {"mode": "down"})
    assert again.returncode == 0 and calls == []
    assert "this job started no cluster" in again.stderr


def test_kind_mode_builds_the_image_creates_the_cluster_and_installs_the_chart(tmp_path: Path) -> None:
    done, calls, outputs = run_action(tmp_path, {"mode": "kind", "kubernetes-version": "v1.35.0"})
    assert done.returncode == 0, done.stderr
    work = tmp_path / "runner-temp" / "fakeplugin-action"
    assert calls == [
        f"python-for-pip -m pip install -q {REPO}",
        "fakeplugin --version",
        f"docker build -t fakeplugin:action {REPO}",
        f"kind create cluster --name fakeplugin --config {REPO}/demo/kind/kind-config.yaml "
        f"--kubeconfig {work}/kubeconfig --wait 120s --image kindest/node:v1.35.0",
        "kind load docker-image --name fakeplugin fakeplugin:action",
        f"helm upgrade --install fakeplugin {REPO}/charts/fakeplugin --kubeconfig {work}/kubeconfig "
        f"--namespace nvidia-dra-driver-gpu --create-namespace -f {REPO}/examples/seed-lab-values.yaml "
        f"--set-file inventory={REPO}/demo/kind/inventory.yaml --set image.repository=fakeplugin "
        "--set image.tag=action --wait --timeout 5m",
    ]
    assert outputs == {"kubeconfig": f"{work}/kubeconfig"}
    down, calls, _ = run_action(tmp_path, {"mode": "down"})
    assert down.returncode == 0 and calls == ["kind delete cluster --name fakeplugin"]


@pytest.mark.parametrize(
    ("inputs", "error"),
    [
        ({"mode": "remote"}, "mode: 'remote' is not one of local, kind, down"),
        ({"kubernetes-version": "latest"}, "kubernetes-version: 'latest' is not a Kubernetes version"),
        (
            {"with": "kueue,grafana"},
            "with: unknown add-on 'grafana' (known: kueue, prometheus, keda, karpenter)",
        ),
        ({"mode": "kind", "with": "kueue"}, "with: add-ons (kueue) run in mode local only"),
        ({"inventory": "no/such.yaml"}, "inventory: no such file: no/such.yaml"),
    ],
)
def test_a_bad_input_fails_before_anything_runs(tmp_path: Path, inputs: dict[str, str], error: str) -> None:
    done, calls, outputs = run_action(tmp_path, inputs)
    assert done.returncode == 1
    assert f"::error title=fakeplugin action::{error}" in done.stderr
    assert calls == [] and outputs == {}


def test_prometheus_without_its_package_fails_before_the_cluster_starts(tmp_path: Path) -> None:
    # A PATH of the script's own tools only, whatever this machine has installed.
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ("bash", "sed", "mkdir", "cat", "rm", "id", "env", "basename"):
        (tools / name).symlink_to(shutil.which(name) or name)
    done, calls, _ = run_action(tmp_path, {"with": "prometheus"}, system=str(tools))
    assert done.returncode == 1
    assert "with: prometheus needs the prometheus package" in done.stderr
    assert not any("cluster up" in c for c in calls)


def test_the_action_passes_every_input_to_the_script_and_its_outputs_are_the_scripts() -> None:
    action = yaml.safe_load((REPO / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    assert all(step.get("shell") == "bash" for step in steps if "run" in step)
    (run,) = [step for step in steps if "run" in step]
    assert run["run"] == '"$GITHUB_ACTION_PATH/hack/action/run.sh"'
    assert run["env"] == {
        **{
            f"INPUT_{name.upper().replace('-', '_')}": f"${{{{ inputs.{name} }}}}"
            for name in action["inputs"]
        },
        "ACTION_PATH": "${{ github.action_path }}",
    }
    # Inputs are read through env only, never spliced into a script.
    assert not any("inputs." in step.get("run", "") for step in steps)
    assert {name: o["value"] for name, o in action["outputs"].items()} == {
        "kubeconfig": "${{ steps.run.outputs.kubeconfig }}",
        "state-dir": "${{ steps.run.outputs.state-dir }}",
    }
    assert run["id"] == "run"
    for name, spec in action["inputs"].items():
        assert spec["description"] and spec["required"] is False, name
    assert action["inputs"]["mode"]["default"] == "local"
    # Every input is one the script reads, and docs/ci.md's table says each.
    script = SCRIPT.read_text()
    table = (REPO / "docs" / "ci.md").read_text()
    for name in action["inputs"]:
        assert f"INPUT_{name.upper().replace('-', '_')}" in script, name
        assert re.search(rf"^\| `{re.escape(name)}` \|", table, re.M), name
