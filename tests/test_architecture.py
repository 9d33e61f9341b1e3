"""docs/architecture.md, the map of the house, against the code: every path, module and name it shows in
backticks exists, so the page cannot drift when a module moves or a class is renamed. (Its Layers table is
checked against tests/test_layers.py's LAYERS there; every package stands in that table.)"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from tests.harness.paths import REPO

PAGE = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "fakeplugin"
# Backticked text that names no code of ours: commands and flags, values, labels, environment variables.
NOT_CODE = re.compile(r"[\s<>=:*…]|^-|^\.|\.\w+\.com|^[a-z0-9.-]+$|^[A-Z_]+$|^\d")
# What the page cites of upstream code and of the API, by its own name: not ours to find here.
UPSTREAM = frozenset(
    {
        "doc.go",  # Kubernetes' package docs
        "kubeletplugin/draplugin.go",  # k8s.io/dynamic-resource-allocation
        "getResourceClaims",  # its helper's claim checks
        "ApiClient",  # the official kubernetes client's
        "nvidia.com/gpu.clique",  # a node label
        "/metrics",  # an HTTP path
        "**/*",  # a glob in pyproject.toml
        "driverRelease",  # inventory fields and device attributes (docs/inventory.md)
        "driverVersion",
        "cudaDriverVersion",
    }
)


def backticked(text: str) -> list[str]:
    """Every `...` outside code blocks."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose)


def is_path(token: str) -> bool:
    return "/" in token or token.endswith((".py", ".sh", ".md"))


def path_exists(token: str, package: Path) -> bool:
    """A path from the repository root, or from fakeplugin/ or one of its folders (`publish/` beside
    `drivers/gpu/` on the page)."""
    roots = [REPO, package, *(d for d in package.rglob("*") if d.is_dir())]
    return any((root / token).exists() for root in roots)


def defined_names(package: Path) -> set[str]:
    """Every class, function and module-level name defined in the package."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                names.add(node.name)
                names.update(n.name for n in node.body if isinstance(n, ast.FunctionDef))
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return names


def dotted_exists(token: str, names: set[str]) -> bool:
    """`runtime.driver.NodeDirs`, `fakeplugin.commands.SHARED`: a module of fakeplugin, then attributes; or
    `Nodes.close`: a class of ours and a name it defines."""
    parts = token.removeprefix("fakeplugin.").split(".")
    if len(parts) == 2 and parts[0][:1].isupper():
        return parts[0] in names and parts[1] in names
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("fakeplugin." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def missing(text: str, package: Path) -> list[str]:
    names = defined_names(package)
    gone = []
    for token in dict.fromkeys(backticked(text)):
        name = token.removesuffix("()").split("(")[0]
        if name in UPSTREAM or "<" in name:
            continue
        if is_path(name) or (REPO / name).exists():
            if not path_exists(name, package):
                gone.append(f"path {name}")
        elif re.fullmatch(r"[A-Za-z_]\w*(\.\w+)+", name) and not name.endswith((".com", ".io")):
            if not dotted_exists(name, names):
                gone.append(f"module or name {name}")
        elif (
            re.fullmatch(r"[A-Za-z_]\w*", name)
            and not NOT_CODE.search(name)
            and name not in names
            and not any((package / f).exists() for f in (name, f"{name}.py"))
        ):
            gone.append(f"name {name}")
    return gone


def test_every_path_module_and_name_on_the_page_exists() -> None:
    gone = missing(PAGE.read_text(encoding="utf-8"), PACKAGE)
    assert not gone, f"docs/architecture.md names what the code no longer has: {gone}"


def test_a_gone_module_or_name_is_found() -> None:
    """The check can fail: a moved file, a renamed class and a module that is gone are each reported."""
    page = "`runtime/gone.py` holds `NoSuchClass`; `runtime.driver.NoSuchName`, `runtime.driver.NodeDirs`"
    assert missing(page, PACKAGE) == [
        "path runtime/gone.py",
        "name NoSuchClass",
        "module or name runtime.driver.NoSuchName",
    ]
