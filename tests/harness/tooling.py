"""Shared by tests that need an external tool (helm, hadolint)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    """Skip when a tool is missing on a developer's machine; fail in CI (CI=true), which must have it."""
    if os.environ.get("CI") == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
