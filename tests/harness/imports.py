"""Every import statement of a Python source, read with ast (nothing is imported): the one reader the
layout tests share (tests/test_harness_layout.py, tests/test_layers.py)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import NamedTuple


class Import(NamedTuple):
    """One import: `import a.b` is (line, "a.b", ()); `from a import b, c` is (line, "a", ("b", "c")), each
    name being a module a.b or a name of module a."""

    line: int
    module: str
    names: tuple[str, ...]


def imports(source: str, file: str) -> Iterator[Import]:
    """The imports anywhere in the source (module level, functions, `if TYPE_CHECKING:`), relative ones
    resolved from the package of `file`, a dotted path from the repository root (tests/harness/__init__.py:
    tests.harness.__init__)."""
    package = file.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (Import(node.lineno, alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            anchor = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*anchor, node.module] if node.module else anchor)
            yield Import(node.lineno, module, tuple(alias.name for alias in node.names))
