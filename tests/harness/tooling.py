"""Shared by tests that need an external tool (helm, hadolint, actionlint): `unavailable`, `tool`, one of the
binaries hack/build-k8s.sh builds (found like the cluster's: TEST_ASSET_<NAME> wins), and `actionlint`, the
workflow linter `hack/build-k8s.sh --only actionlint` builds, with `lint_workflow` running it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from fakeplugin.cluster import binaries, versions


def unavailable(reason: str) -> NoReturn:
    """Skip when a tool is missing on a developer's machine; fail in CI (CI=true), which must have it."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def tool(name: str) -> Path:
    try:
        return binaries.find(name)
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))


def actionlint() -> Path:
    """TEST_ASSET_ACTIONLINT, else $FAKEPLUGIN_CACHE/actionlint/<ACTIONLINT_VERSION>/actionlint."""
    env = os.environ
    name = binaries.asset_env_var("actionlint")
    found = (
        Path(env[name])
        if env.get(name)
        else binaries.cache_root() / "actionlint" / versions.ACTIONLINT_VERSION / "actionlint"
    )
    if not (found.is_file() and os.access(found, os.X_OK)):
        unavailable(
            f"actionlint {versions.ACTIONLINT_VERSION}: no executable at {found}; build it with "
            "`hack/build-k8s.sh --only actionlint` (needs Go and the Go module proxy)"
        )
    return found


def lint_workflow(path: Path, project: Path) -> subprocess.CompletedProcess[str]:
    """actionlint on one workflow file of `project` (a folder with .git and .github/workflows: where `uses:
    ./` finds a local action.yml, whose inputs it checks), with shellcheck on its `run:` scripts where
    shellcheck is installed (hack/setup.sh installs it), without pyflakes."""
    shellcheck = shutil.which("shellcheck") or ""
    argv = [str(actionlint()), "-no-color", f"-shellcheck={shellcheck}", "-pyflakes=", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=project)
