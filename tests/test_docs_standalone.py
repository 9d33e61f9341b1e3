"""The repository stands alone: no file cites a document that is not in it.

Upstream sources are cited by repository, path and version; our own by a page of docs/ (CONTRIBUTING.md,
*Docs that stay true*). Checked over every file git knows (tracked or new, not ignored):
- no file names one of the team's notes that were never part of the repository;
- every relative link of a Markdown file, and every `docs/<page>.md` a file names, exists;
- a section cited by title (`docs/x.md, *Title*` or `"Title"`) is a heading of that page.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Notes the team wrote outside the repository. A bare name is fine only for a sibling of the citing file
# (docs/kueue.md naming kueue-kind.md); anything else named so is the outside note.
OUTSIDE_NOTES = (
    "architecture-sketch.md",
    "autoscaling.md",
    "compute-domains.md",
    "fake-nvidia-smi.md",
    "kind-offline.md",
    "kueue.md",
    "nvidia-driver-shape.md",
    "peers.md",
    "perf-anchor.md",
    "seed-lab.md",
    "telemetry.md",
    "test-cluster.md",
    "wire-protocol.md",
)
OUTSIDE_DIRS = ("gpu-captures/",)
NOTE = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, OUTSIDE_NOTES + OUTSIDE_DIRS)) + r")")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOCS_PAGE = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*docs/[\w-]+\.md)\b")
SECTION = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.md)`?\)?,? (?:\*([^*\n]+)\*|\"([^\"\n]+)\")")
THIS = "tests/test_docs_standalone.py"


@cache
def files() -> tuple[str, ...]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(sorted(p for p in out.stdout.splitlines() if (REPO / p).is_file()))


def text(path: str) -> str | None:
    try:
        return (REPO / path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # binary


def texts() -> list[tuple[str, str]]:
    return [(p, t) for p in files() if p != THIS and (t := text(p)) is not None]


def line_of(content: str, offset: int) -> int:
    return content.count("\n", 0, offset) + 1


def resolve(citing: str, target: str) -> Path:
    """A path named in `citing`: relative to its folder when it is there, else to the repository."""
    here = (REPO / citing).parent / target
    return here if here.exists() else REPO / target


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    plain = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def headings(path: Path) -> list[str]:
    body = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [re.sub(r"`", "", h).strip() for h in re.findall(r"^#{1,6} (.+)$", body, re.M)]


def test_no_file_cites_a_note_outside_the_repository() -> None:
    found = [
        f"{path}:{line_of(content, m.start())}: {m.group(1)}"
        for path, content in texts()
        for m in NOTE.finditer(content)
        if not ((REPO / path).parent / m.group(1)).exists()
    ]
    assert found == [], "cite the upstream source or a page of docs/ instead"


def test_the_check_finds_outside_notes_and_spares_our_pages() -> None:
    cited = "see nvidia-driver-shape.md §4.1, gpu-captures/h200-2gpu and kueue.md"
    assert [m.group(1) for m in NOTE.finditer(cited)] == [
        "nvidia-driver-shape.md",
        "gpu-captures/",
        "kueue.md",
    ]
    assert NOTE.search("docs/kueue.md and docs/compute-domains.md") is None
    assert (REPO / "docs" / "kueue.md").exists()


def test_every_relative_markdown_link_exists() -> None:
    broken = []
    for path, content in texts():
        if not path.endswith(".md"):
            continue
        for m in LINK.finditer(content):
            target, _, anchor = m.group(1).partition("#")
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            where = (REPO / path).parent / target if target else REPO / path
            if not where.exists():
                broken.append(f"{path}:{line_of(content, m.start())}: {m.group(1)}")
            elif anchor and where.suffix == ".md" and anchor not in map(slug, headings(where)):
                broken.append(f"{path}:{line_of(content, m.start())}: no heading for #{anchor}")
    assert broken == []


def upstream(content: str, offset: int) -> bool:
    """Whether the path at `offset` follows a repository's name (`github.com/o/r docs/x.md`): theirs."""
    before = content[:offset].split()
    return bool(before) and re.fullmatch(r"\(?(github\.com/)?[\w.-]+/[\w.-]+", before[-1]) is not None


def test_every_docs_page_named_exists() -> None:
    missing = [
        f"{path}:{line_of(content, m.start())}: {m.group(1)}"
        for path, content in texts()
        for m in DOCS_PAGE.finditer(content)
        if not resolve(path, m.group(1)).exists() and not upstream(content, m.start())
    ]
    assert missing == []


def test_every_section_cited_by_title_is_a_heading_of_its_page() -> None:
    missing = []
    for path, content in texts():
        for m in SECTION.finditer(content):
            page = resolve(path, m.group(1))
            title = (m.group(2) or m.group(3)).replace("`", "").strip()
            if not page.exists() or page.suffix != ".md":
                continue  # a missing page fails the tests above
            if not any(h.lower().startswith(title.lower()) for h in headings(page)):
                missing.append(f"{path}:{line_of(content, m.start())}: {m.group(1)}, {title!r}")
    assert missing == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        (
            "Towards v0.5.0 (main 95932046, unverified for the tag)",
            "towards-v050-main-95932046-unverified-for-the-tag",
        ),
        ("0.5.0-dev: consumable shares", "050-dev-consumable-shares"),
        ("The fake `nvidia-smi`", "the-fake-nvidia-smi"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
