"""The test tiers (tests/harness/tiers.py): every module's tier, the default selection, and the fast
tier's guard, each run in a pytest of its own."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness.paths import REPO
from tests.harness.tiers import TIERS

TESTS = REPO / "tests"
FOLDER_TIER = {TESTS / "e2e": "cluster", TESTS / "kind": "kind"}


def module_markers(path: Path) -> set[str]:
    """The tier markers a module's `pytestmark` names (a single mark or a list of them)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            return {n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute) and n.attr in TIERS}
    return set()


@pytest.mark.parametrize("folder", list(FOLDER_TIER), ids=lambda p: p.name)
def test_every_end_to_end_module_carries_its_tier(folder: Path) -> None:
    modules = sorted(folder.glob("test_*.py"))
    assert modules
    unmarked = [m.name for m in modules if FOLDER_TIER[folder] not in module_markers(m)]
    assert not unmarked, (
        f"{folder.relative_to(REPO)}: `pytestmark = pytest.mark.{FOLDER_TIER[folder]}` missing"
    )


def pytest_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest with the tiers plugin in `directory`, its own process (audit hooks are per process)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.harness.tiers", "-p", "no:cacheprovider", "-q", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


GUARDED = """
import socket
import subprocess

import pytest

from fakeplugin.cluster.binaries import cache_root


def test_starts_go():
    subprocess.run(["go", "version"], check=False)


def test_swallows_the_refusal():
    try:
        subprocess.run("kubectl version", shell=True, check=False)
    except Exception:
        pass


def test_reads_the_cache():
    (cache_root() / "k8s").exists()
    open(cache_root() / "k8s" / "etcd")


def test_talks_to_docker():
    with socket.socket(socket.AF_UNIX) as s:
        s.connect("/run/docker.sock")


def test_runs_python():
    assert subprocess.run(["true"], check=False).returncode == 0


@pytest.mark.build
def test_marked_may_run_go():
    assert b"go version" in subprocess.run(["go", "version"], capture_output=True, check=True).stdout
"""


def test_the_guard_fails_fast_tests_that_start_a_cluster_build_or_docker(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_guarded.py").write_text(textwrap.dedent(GUARDED))
    # A test outside tests/ (an example, a user's) is in no tier: not guarded, not deselected.
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "test_elsewhere.py").write_text(
        "import subprocess\n\ndef test_starts_go():\n    subprocess.run(['go', 'version'], check=True)\n"
    )
    result = pytest_in(tmp_path, "-rf")
    out = result.stdout
    assert result.returncode == 1, out
    assert "4 failed, 2 passed, 1 deselected" in out
    assert "tests/test_guarded.py::test_starts_go: a fast-tier test started go" in out
    assert "a fast-tier test started kubectl" in out  # swallowed by the test, failed all the same
    assert "a fast-tier test touched the build cache (/dev/null/fast-tier-has-no-cache/k8s/etcd)" in out
    assert "a fast-tier test connected to Docker (/run/docker.sock)" in out
    assert "give it a tier marker: build, cluster, kind" in out


def test_a_marked_test_is_not_guarded_and_runs_when_selected(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_guarded.py").write_text(textwrap.dedent(GUARDED))
    result = pytest_in(tmp_path, "-m", "build")
    assert result.returncode == 0, result.stdout
    assert "1 passed, 5 deselected" in result.stdout


def collected(*args: str) -> set[str]:
    result = pytest_in(REPO, "--co", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}


def test_plain_pytest_is_the_fast_tier_and_a_named_module_runs_whatever_its_tier() -> None:
    plain = collected()
    assert "tests/test_quantity.py" in plain
    assert not {m for m in plain if m.startswith(("tests/e2e/", "tests/kind/")) or m == "tests/test_chart.py"}
    named = collected("tests/test_quantity.py", "tests/e2e/test_dra.py", "tests/test_chart.py")
    assert named == {"tests/test_quantity.py", "tests/e2e/test_dra.py", "tests/test_chart.py"}
