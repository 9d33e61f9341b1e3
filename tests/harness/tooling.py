"""Shared by tests that need an external tool (helm, hadolint): `unavailable`, and `tool`, one of the binaries
hack/build-k8s.sh builds (found like the cluster's: TEST_ASSET_<NAME> wins)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

from fakeplugin.cluster import binaries


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
