"""Fixtures shared by the unit and contract tests (the e2e ones have tests/e2e/conftest.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.nvml.build import build as build_nvml
from fakeplugin.server import ServerSettings
from tests.harness import DRIVER
from tests.harness.server import CannedDriver, Running
from tests.harness.smi_shells import SHELLS, SmiShell, make_shell


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Not tmp_path: its long names eat into the 107 bytes a unix socket path may have.
    path = Path(tempfile.mkdtemp(prefix="fpsrv-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def serve(short_dir: Path) -> Iterator[Any]:
    started: list[Running] = []

    def start(driver: CannedDriver | None = None, **overrides: Any) -> Running:
        settings = {
            "registrar_dir": short_dir / "registry",
            "plugins_dir": short_dir / "plugins",
            **overrides,
        }
        cfg = ServerSettings(driver_name=DRIVER, **settings)
        running = Running(driver or CannedDriver(), cfg)
        started.append(running)
        running.server.start()
        return running

    yield start
    for running in started:
        running.close()


@pytest.fixture(scope="session", params=list(SHELLS))
def smi_shell(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> SmiShell:
    """A shell and awk the fake nvidia-smi runs under (tests/harness/smi_shells.py): every test that
    runs it, under each pair."""
    return make_shell(request.param, tmp_path_factory.mktemp("smi-shells") / request.param)


@pytest.fixture(scope="session")
def nvml_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The mock NVML library (fakeplugin/nvml), compiled once per session into a cache of the session's own
    (the fast tier has no build cache)."""
    return build_nvml(tmp_path_factory.mktemp("nvml-cache"))
