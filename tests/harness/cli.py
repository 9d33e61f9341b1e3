"""fakeplugin's commands as a user runs them: a subprocess of this interpreter, output captured."""

from __future__ import annotations

import subprocess
import sys

from tests.harness.paths import SEED_LAB


def render_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`fakeplugin render --inventory examples/seed-lab.yaml ARGS`; a failure is returned, not raised."""
    return subprocess.run(
        [sys.executable, "-m", "fakeplugin", "render", "--inventory", str(SEED_LAB), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
