"""The GitHub Action's script (hack/action/run.sh; docs/ci.md) in local mode on this machine, as the runner
runs it: a real local cluster of the seed lab, its kubeconfig written to $GITHUB_OUTPUT and working, then
`mode: down` taking it down. fakeplugin is this checkout's (installed editable already): the Python the
script's `pip install` runs is a stand-in that installs nothing. tests/test_action.py checks the script's
arguments and errors with fakes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.host import require_cluster_host
from tests.harness.paths import REPO
from tests.harness.seedlab import A5000, T10

pytestmark = pytest.mark.cluster


@pytest.fixture
def runner_temp() -> Iterator[Path]:
    """Short, directly in /tmp: the state dir below it holds the kubelets' sockets (at most 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="fa-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def action(runner_temp: Path, mode: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    no_pip = runner_temp / "python-no-pip"
    no_pip.write_text('#!/bin/sh\necho "pip skipped: $*" >&2\n')
    no_pip.chmod(0o755)
    output = runner_temp / f"github-output-{mode}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # this checkout's fakeplugin
        "INPUT_MODE": mode,
        "ACTION_PATH": str(REPO),
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_OUTPUT": str(output),
        "PYTHON": str(no_pip),
    }
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "action" / "run.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()) if output.exists() else {}
    return done, outputs


def test_local_mode_starts_the_seed_lab_and_down_takes_it_down(runner_temp: Path) -> None:
    kubectl = require_cluster_host()["kubectl"]
    state = runner_temp / "fakeplugin-action" / "cluster"
    up, outputs = action(runner_temp, "local")
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        assert outputs == {
            "state-dir": str(state),
            "kubeconfig": str(runner_temp / "fakeplugin-action" / "kubeconfig"),
        }
        env = {**os.environ, "KUBECONFIG": outputs["kubeconfig"]}
        nodes = subprocess.run(
            [str(kubectl), "get", "nodes", "-o", "json"], env=env, capture_output=True, text=True, check=True
        )
        assert {T10, A5000} <= {n["metadata"]["name"] for n in json.loads(nodes.stdout)["items"]}
        slices = subprocess.run(
            [str(kubectl), "get", "resourceslices", "-o", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert {s["spec"]["driver"] for s in json.loads(slices.stdout)["items"]} >= {"gpu.nvidia.com"}
    finally:
        down, _ = action(runner_temp, "down")
    assert down.returncode == 0, down.stderr
    assert not (runner_temp / "fakeplugin-action" / "started").exists()
    assert (
        subprocess.run(
            [str(Path(sys.executable).parent / "fakeplugin"), "cluster", "status", "--state-dir", str(state)],
            capture_output=True,
        ).returncode
        == 1
    )
