"""One word, one meaning: a public class name is defined in one module of fakeplugin/ only
(docs/architecture.md, "Words"). Two classes of one name are two meanings a reader must tell apart by their
import; where a name must repeat, ALLOWED says why. A pure scan of the sources (ast; nothing imported); the
generated gRPC stubs are upstream's names and are not scanned."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.harness.paths import REPO

PACKAGE = REPO / "fakeplugin"
GENERATED = PACKAGE / "_proto"
# name → why it is defined in more than one module. Empty: none must repeat today.
ALLOWED: dict[str, str] = {}


def public_classes(package: Path) -> dict[str, list[str]]:
    """Each public (no leading underscore) top-level class name → the modules defining it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        if GENERATED in path.parents:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8"), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(str(path.relative_to(package.parent)))
    return found


def test_each_public_class_name_is_defined_once() -> None:
    repeated = {name: where for name, where in public_classes(PACKAGE).items() if len(where) > 1}
    unexplained = {name: where for name, where in repeated.items() if name not in ALLOWED}
    assert not unexplained, (
        "public class names defined in more than one module (rename one, or add the name to ALLOWED in "
        f"tests/test_names.py with the reason it must repeat): {unexplained}"
    )


def test_the_allow_list_names_only_names_that_repeat() -> None:
    repeated = {name for name, where in public_classes(PACKAGE).items() if len(where) > 1}
    assert set(ALLOWED) <= repeated, f"ALLOWED names a class defined once: {sorted(set(ALLOWED) - repeated)}"


def test_the_scan_sees_a_repeated_name(tmp_path: Path) -> None:
    """The check can fail: two modules defining one class name are found, a private one is not."""
    (tmp_path / "a.py").write_text("class Twice:\n    pass\n\nclass _Private:\n    pass\n")
    (tmp_path / "b.py").write_text("class Twice:\n    pass\n\nclass _Private:\n    pass\n")
    found = public_classes(tmp_path)
    assert sorted(found) == ["Twice"] and len(found["Twice"]) == 2
