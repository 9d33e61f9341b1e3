"""The fenced code blocks of our docs, and how the doc tests run them (CONTRIBUTING.md, *Docs that stay
true*).

`blocks()`: every block of README.md, CONTRIBUTING.md and docs/*.md. A test names the blocks it runs by
`Ref(page, first line)`; `E2E` names those tests/e2e/test_docs.py runs. tests/test_docs.py fails on a block
that no test runs and its one table of blocks that cannot run does not list. `commands(block)`: a shell
block's commands, each with the output the doc shows after it (`$ command` lines followed by output);
`run(command)` runs one as a user would, with the repository's `fakeplugin` first on PATH; `shows(expected,
out)` and `shows_yaml` compare the doc's excerpt with what the command printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from tests.harness.paths import REPO

FENCE = re.compile(r"^(```+)\s*([\w-]*)[^\n]*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository
    line: int  # of the opening fence
    lang: str  # the info string's first word, "" when none
    text: str

    @property
    def first(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


class Ref(NamedTuple):
    """A block by its page and the start of its first non-empty line."""

    page: str
    starts: str

    def matches(self, block: Block) -> bool:
        return block.page == self.page and block.first.startswith(self.starts)


CALLS = Ref("docs/plugin.md", "fakeplugin calls --node")
FAULTS = Ref("docs/faults.md", "fakeplugin fault claim team-a/my-gpu")
BUILDERS = Ref("docs/testing.md", "from fakeplugin.testing import claim_pod")
EXAMPLE = Ref("docs/testing.md", "pytest examples/test_gpu_workload.py")
CI_WORKFLOW = Ref("docs/ci.md", "name: gpu-workloads")  # tests/test_workflows.py lints it with actionlint

# The blocks tests/e2e/test_docs.py runs on the e2e session's cluster, and how.
E2E = {
    CALLS: "`fakeplugin calls` on the session cluster, after a pod used team-a/my-gpu on the T10 node",
    FAULTS: "`fakeplugin fault` on team-a/my-gpu and the T10 node, the annotations read back",
    BUILDERS: "the snippet executed with the session cluster as `cluster`: the pod runs on a T10",
    EXAMPLE: "the attached run (third command) with the session's kubeconfig and state dir; the first two "
    "lines start clusters of their own",
}


def pages() -> list[str]:
    found = ["README.md", "CONTRIBUTING.md", *(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
    return sorted(p for p in found if (REPO / p).exists())


def blocks() -> list[Block]:
    out = []
    for page in pages():
        lines = (REPO / page).read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(m.group(1)))
            out.append(Block(page, i + 1, m.group(2), "\n".join(lines[i + 1 : end]) + "\n"))
            i = end + 1
    return out


def block(ref: Ref) -> Block:
    (found,) = [b for b in blocks() if ref.matches(b)]
    return found


class Command(NamedTuple):
    line: str  # without the prompt; a heredoc's body included
    shown: str  # the output the doc shows after it, "" when none


def commands(b: Block) -> list[Command]:
    """Shell lines, comments dropped; `\\` continuations and heredocs (`<<'END'` ... `END`) joined."""
    out: list[Command] = []
    lines = b.text.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if prompted and not line.startswith("$ "):
            if out:
                out[-1] = out[-1]._replace(shown=out[-1].shown + line + "\n")
            continue
        line = line.removeprefix("$ ")
        while line.endswith("\\") and i < len(lines):
            line = line[:-1].rstrip() + " " + lines[i].strip()
            i += 1
        if heredoc := re.search(r"<<'?(\w+)'?", line):
            body = []
            while lines[i] != heredoc.group(1):
                body.append(lines[i])
                i += 1
            line = "\n".join([line, *body, lines[i]])
            i += 1
        line = re.sub(r"\s+#\s.*$", "", line) if "\n" not in line else line
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(Command(line, ""))
    return out


def run(
    command: str, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """`command` in bash, as a user at the repository root: our `fakeplugin` (and python) first on PATH,
    help text wrapped at 80 columns as in the docs."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    full = {**os.environ, "PATH": path, "COLUMNS": "80", **(env or {})}
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=cwd,
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def shows(expected: str, out: str) -> list[str]:
    """The parts of the doc's `expected` output (split at lines holding `...`) missing from `out`, in
    order; [] when the excerpt is what the command prints."""
    parts, current = [], []
    for line in expected.splitlines():
        if "..." in line:
            parts.append(current)
            current = []
        else:
            current.append(line.rstrip())
    parts.append(current)
    printed = "\n".join(line.rstrip() for line in out.splitlines())
    missing, at = [], 0
    for part in (p for p in parts if p):
        text = "\n".join(part)
        found = printed.find(text, at)
        if found < 0:
            missing.append(text)
        else:
            at = found + len(text)
    return missing


def shows_yaml(expected: str, out: str) -> bool:
    """Whether the YAML excerpt (`...` lines dropped, `{...}` standing for anything) is part of one of the
    YAML documents `out` printed, flow or block style alike."""
    lines = [line for line in expected.splitlines() if line.strip() != "..."]
    indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
    part = yaml.safe_load("\n".join(line[indent:] for line in lines).replace("{...}", '"..."'))
    return any(somewhere(doc, part) for doc in yaml.safe_load_all(out))


def somewhere(actual: Any, part: Any) -> bool:
    if contains(actual, part):
        return True
    children = actual.values() if isinstance(actual, dict) else actual if isinstance(actual, list) else ()
    return any(somewhere(child, part) for child in children)


def contains(actual: Any, part: Any) -> bool:
    if part == "...":
        return True
    if isinstance(part, dict):
        return isinstance(actual, dict) and all(
            k in actual and contains(actual[k], v) for k, v in part.items()
        )
    if isinstance(part, list):
        return isinstance(actual, list) and all(any(contains(a, p) for a in actual) for p in part)
    return actual == part
