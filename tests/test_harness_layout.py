"""The suites' own layout: a test module (test_*.py, conftest.py) imports no other test module, as the
helpers they share live in tests/harness, whose docstring lists its modules; one DRIVER constant."""

from __future__ import annotations

import ast
from pathlib import Path

import tests.harness
from tests.harness.imports import imports

TESTS = Path(__file__).resolve().parent
HARNESS = TESTS / "harness"


def dotted(path: Path) -> str:
    """A file's dotted path from the repository root (tests/harness/__init__.py: tests.harness.__init__)."""
    return ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)


def imported_modules(source: str, file: str) -> set[str]:
    """Every module of package `tests` the source imports, or may import (`from a import b`: a and a.b),
    anywhere in it; relative imports resolved from the package of `file` (a dotted path)."""
    found: set[str] = set()
    for imp in imports(source, file):
        found.add(imp.module)
        found.update(f"{imp.module}.{name}" for name in imp.names)
    return {name for name in found if name == "tests" or name.startswith("tests.")}


def is_test_module(name: str) -> bool:
    last = name.rpartition(".")[2]
    return last.startswith("test_") or last == "conftest"


def test_the_import_reader_finds_every_spelling_of_a_test_module() -> None:
    source = """
import tests.test_server
import json
from tests.e2e.conftest import require_cluster_host
from tests.e2e import test_dra
from . import test_mig
from .conftest import CLUSTER
from tests.harness.kube import wait_for

def later():
    from tests.test_prepare import gpu
"""
    found = imported_modules(source, "tests.kind.test_kind")
    assert {name for name in found if is_test_module(name)} == {
        "tests.test_server",
        "tests.e2e.conftest",
        "tests.e2e.test_dra",
        "tests.kind.test_mig",
        "tests.kind.conftest",
        "tests.test_prepare",
    }
    assert "tests.harness.kube" in found and not is_test_module("tests.harness.kube")
    assert imported_modules("from .kube import get", dotted(HARNESS / "__init__.py")) == {
        "tests.harness.kube",
        "tests.harness.kube.get",
    }


def test_no_module_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(TESTS)): sorted(name for name in found if is_test_module(name))
        for path in sorted(TESTS.rglob("*.py"))
        if (found := imported_modules(path.read_text(), dotted(path)))
    }
    assert {path: names for path, names in offenders.items() if names} == {}, "move them into tests/harness"
    assert len(offenders) > 50  # most modules import something of tests/: the reader sees them


def test_the_harness_docstring_lists_each_of_its_modules() -> None:
    listed = {line.split(":")[0].removeprefix("- ") for line in (tests.harness.__doc__ or "").splitlines()}
    modules = {p.stem for p in HARNESS.glob("*.py") if p.stem != "__init__"}
    assert modules <= listed, f"tests/harness/__init__.py does not list {sorted(modules - listed)}"
    assert not [p for p in HARNESS.iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_one_driver_constant() -> None:
    assigned = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name) and target.id == "DRIVER"
    ]
    assert assigned == ["harness/__init__.py"]
    assert tests.harness.DRIVER == "gpu.nvidia.com"
