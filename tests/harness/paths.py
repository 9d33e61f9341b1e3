"""Where the repository's files are, for tests that read them."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SEED_LAB = EXAMPLES / "seed-lab.yaml"  # the reference lab: a T10 node (2 GPUs) and an A5000 node
