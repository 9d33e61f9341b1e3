"""Golden files (tests/golden/): a render compared with the exact expected text.

After an intended change, regenerate them with UPDATE_GOLDEN=1 and review `git diff tests/golden`.
"""

from __future__ import annotations

import os
from typing import Any

from fakeplugin.render import to_yaml
from tests.harness.paths import REPO

GOLDEN = REPO / "tests" / "golden"


def check_golden(name: str, docs: list[dict[str, Any]]) -> None:
    """`docs` as YAML must be tests/golden/<name>; with UPDATE_GOLDEN=1 they become it."""
    path = GOLDEN / name
    text = to_yaml(docs)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; create it with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; if intended, regenerate with UPDATE_GOLDEN=1"


def check_golden_text(name: str, text: str) -> None:
    """`text` (a command's output) must be tests/golden/<name>; with UPDATE_GOLDEN=1 it becomes it."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; create it with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; if intended, regenerate with UPDATE_GOLDEN=1"
