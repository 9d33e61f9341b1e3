"""The house: fakeplugin's packages stand in layers, low to high (LAYERS below, the one list of them;
docs/architecture.md, "Layers", says what each layer is). The rules:

- every top-level package or module of fakeplugin/ stands in exactly one layer;
- an import goes down, or sideways within its layer, never up;
- no modules import each other in a circle, nor do packages (so a sideways import goes one way only).

A pure scan of the sources (tests.harness.imports: ast, nothing is imported). Every import counts: at module
level, in a function, under `if TYPE_CHECKING:`. An import names what it imports (`from fakeplugin.x
import y`: the module fakeplugin.x.y if there is one, else fakeplugin.x); the packages Python runs on the
way to a module (fakeplugin/x/__init__.py before fakeplugin.x.y) are not counted, and neither are
`importlib.import_module` calls (those of the lazy packages cluster, commands and testing load only their
own modules).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.harness.imports import imports
from tests.harness.paths import REPO

Layers = Sequence[tuple[str, Set[str]]]

# Low to high; a module stands in the layer of its top-level package or module under fakeplugin/.
LAYERS: Layers = (
    # definitions and pure rules: the package's own __init__ (`fakeplugin`), core types, names, formats, the
    # emulated releases, GPU models, MIG's rules, the ComputeDomain API (apis), the generated gRPC stubs, the
    # mock NVML library's source and build (nvml: C and the standard library only)
    (
        "ground",
        {
            "fakeplugin",
            "_proto",
            "model",
            "quantity",
            "k8snames",
            "atomicfile",
            "boundedhttp",
            "yamlschema",
            "logs",
            "scheme",
            "releases",
            "featuregates",
            "consumableshares",
            "mig",
            "apis",
            "profiles",
            "cdi",
            "resourceslices",
            "nvml",
        },
    ),
    ("inventory", {"inventory"}),  # the inventory file, everyone's input
    ("kube", {"kube"}),  # the API client, no driver in it
    ("runtime", {"runtime"}),  # the plugin runtime every driver shares: the contract, host loops, publisher
    # what drivers, hosts and the cluster are made of, and the gRPC edge the runtime is reached through
    ("parts", {"faults", "server", "kueue"}),
    # gpu.nvidia.com, compute-domain.nvidia.com; render: what they publish for an inventory, no cluster
    ("drivers", {"drivers", "render"}),
    ("fleet", {"fleet"}),  # the kwok host: every simulated node's DRA side in one process
    ("telemetry", {"telemetry"}),  # dcgm-exporter's /metrics over both hosts' nodes and the fleet's pods
    ("view", {"view"}),  # the fleet view: watches and a read-only page, served by commands and the cluster
    ("cluster", {"cluster"}),  # the real local cluster
    ("testing", {"testing"}),  # for users' tests
    ("commands", {"commands"}),
    ("cli", {"cli", "__main__"}),
)


# A driver's home (fakeplugin/drivers/<driver>/) is entered from outside through its face (its __init__'s
# exports) and the programs it names here, never at its other modules.
DRIVER_ENTRIES: Mapping[str, Set[str]] = {
    "fakeplugin.drivers.gpu": set(),
    "fakeplugin.drivers.computedomain": {
        "fakeplugin.drivers.computedomain.controller",  # `fakeplugin compute-domain-controller`
        "fakeplugin.drivers.computedomain.daemon",  # `fakeplugin compute-domain-daemon`
    },
}


class Edge(NamedTuple):
    file: str  # of the importer, from the repository root
    line: int
    importer: str
    imported: str


class Scan(NamedTuple):
    modules: Mapping[str, Path]
    edges: list[Edge]
    unknown: list[str]  # imports of a fakeplugin module that does not exist


def scan(package: Path) -> Scan:
    """Every module of `package` (a directory) and every import between them."""
    modules: dict[str, Path] = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: list[Edge] = []
    unknown: list[str] = []
    for importer, path in modules.items():
        file = str(path.relative_to(package.parent))
        for imp in imports(path.read_text(encoding="utf-8"), file.removesuffix(".py").replace("/", ".")):
            named = [f"{imp.module}.{name}" for name in imp.names]
            for imported in dict.fromkeys(m if m in modules else imp.module for m in named or [imp.module]):
                if imported.partition(".")[0] != package.name or imported == importer:
                    continue
                if imported in modules:
                    edges.append(Edge(file, imp.line, importer, imported))
                else:
                    unknown.append(
                        f"{file}:{imp.line}: imports {imported}, which is no module of {package.name}/"
                    )
    return Scan(modules, edges, unknown)


def unit(module: str) -> str:
    """The top-level package or module a module belongs to (fakeplugin.drivers.gpu.publish.node: publish)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unplaced(modules: Mapping[str, Path], layers: Layers) -> list[str]:
    """Every package standing in no layer or in two, and every layer entry naming none."""
    units = {unit(m) for m in modules}
    placed = [u for _, members in layers for u in members]
    return (
        [f"{u}: in no layer (add it to LAYERS in tests/test_layers.py)" for u in sorted(units - set(placed))]
        + [f"{u}: in two layers" for u in sorted({u for u in placed if placed.count(u) > 1})]
        + [f"{u}: in LAYERS, but no package or module of fakeplugin/" for u in sorted(set(placed) - units)]
    )


def upward(edges: Sequence[Edge], layers: Layers) -> list[str]:
    """Every import from a lower layer to a higher one."""
    rank = {u: (i, name) for i, (name, members) in enumerate(layers) for u in members}
    found = []
    for e in edges:
        low, high = rank.get(unit(e.importer)), rank.get(unit(e.imported))
        if low and high and high[0] > low[0]:
            found.append(
                f"{e.file}:{e.line}: imports {e.imported}: layer {high[1]} ({unit(e.imported)}) is above "
                f"layer {low[1]} ({unit(e.importer)}); an import goes down or sideways, never up"
            )
    return found


def circles(edges: Sequence[Edge], *, by_package: bool = False) -> list[str]:
    """Every set of modules (or, `by_package`, of packages) that import each other in a circle, with the
    imports that close it."""
    key = unit if by_package else str
    graph: dict[str, set[str]] = {}
    for e in edges:
        if key(e.importer) != key(e.imported):
            graph.setdefault(key(e.importer), set()).add(key(e.imported))
    reach = {start: reachable(graph, start) for start in graph}
    rings = {
        frozenset(n for n in reach[start] if start in reach.get(n, ()))
        for start in reach
        if start in reach[start]
    }
    kind = "packages" if by_package else "modules"
    return [
        f"import cycle between {kind} {', '.join(sorted(ring))}:\n"
        + "\n".join(
            f"  {e.file}:{e.line}: imports {e.imported}"
            for e in edges
            if key(e.importer) in ring and key(e.imported) in ring and key(e.importer) != key(e.imported)
        )
        for ring in sorted(rings, key=sorted)
    ]


def reachable(graph: Mapping[str, Set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.fixture(scope="module")
def house() -> Scan:
    found = scan(REPO / "fakeplugin")
    assert len(found.edges) > 250  # the scan sees the imports (529 at issue 33)
    return found


def test_every_package_stands_in_one_layer(house: Scan) -> None:
    assert unplaced(house.modules, LAYERS) == []


def test_every_import_names_a_module_that_exists(house: Scan) -> None:
    assert house.unknown == []


def test_no_import_goes_up(house: Scan) -> None:
    found = upward(house.edges, LAYERS)
    assert not found, "\n".join(found)


def test_no_modules_import_in_a_circle(house: Scan) -> None:
    found = circles(house.edges)
    assert not found, "\n".join(found)


def test_no_packages_import_in_a_circle(house: Scan) -> None:
    found = circles(house.edges, by_package=True)
    assert not found, "\n".join(found)


def test_the_architecture_doc_shows_these_layers() -> None:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.partition("\n### Layers\n")[2].partition("\n#")[0]
    table = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")]
    rows = table[2:]  # after the header and its rule
    shown = [
        (layer.split(" (")[0].strip(), set(re.findall(r"`([^`]+)`", members))) for layer, members in rows
    ]
    assert shown == [(name, set(members)) for name, members in LAYERS]


SYNTHETIC = {
    "__init__.py": "",
    "low.py": "import json\n\n\ndef later():\n    from fakeplugin.high import thing\n",
    "stray.py": "from fakeplugin.gone import thing\n",
    "high/__init__.py": "from fakeplugin import low\n",
    "high/a.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fakeplugin.high import b\n",
    "high/b.py": "from .a import thing\n",
}


def test_the_checker_flags_every_broken_rule(tmp_path: Path) -> None:
    for name, text in SYNTHETIC.items():
        (tmp_path / "fakeplugin" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fakeplugin" / name).write_text(text)
    layers: Layers = (("ground", {"fakeplugin", "low", "gone"}), ("top", {"high", "low"}))
    found = scan(tmp_path / "fakeplugin")

    assert found.unknown == [
        "fakeplugin/stray.py:1: imports fakeplugin.gone, which is no module of fakeplugin/"
    ]
    assert unplaced(found.modules, layers) == [
        "stray: in no layer (add it to LAYERS in tests/test_layers.py)",
        "low: in two layers",
        "gone: in LAYERS, but no package or module of fakeplugin/",
    ]
    ordered: Layers = (("ground", {"fakeplugin", "low", "stray"}), ("top", {"high"}))
    assert upward(found.edges, ordered) == [
        "fakeplugin/low.py:5: imports fakeplugin.high: layer top (high) is above layer ground (low); "
        "an import goes down or sideways, never up"
    ]
    assert circles(found.edges) == [
        "import cycle between modules fakeplugin.high, fakeplugin.low:\n"
        "  fakeplugin/high/__init__.py:1: imports fakeplugin.low\n"
        "  fakeplugin/low.py:5: imports fakeplugin.high",
        "import cycle between modules fakeplugin.high.a, fakeplugin.high.b:\n"
        "  fakeplugin/high/a.py:4: imports fakeplugin.high.b\n"
        "  fakeplugin/high/b.py:1: imports fakeplugin.high.a",
    ]
    assert circles(found.edges, by_package=True) == [
        "import cycle between packages high, low:\n"
        "  fakeplugin/high/__init__.py:1: imports fakeplugin.low\n"
        "  fakeplugin/low.py:5: imports fakeplugin.high"
    ]


def behind_faces(edges: Sequence[Edge], entries: Mapping[str, Set[str]]) -> list[str]:
    """Every import of a driver's module from outside its home that is neither its face nor an entry."""
    found = []
    for e in edges:
        for home, allowed in entries.items():
            inside = e.importer == home or e.importer.startswith(home + ".")
            if inside or not e.imported.startswith(home + "."):
                continue
            if not any(e.imported == a or e.imported.startswith(a + ".") for a in allowed):
                found.append(f"{e.file}:{e.line}: imports {e.imported}, behind {home}'s face")
    return found


def test_a_driver_is_entered_through_its_face() -> None:
    found = behind_faces(scan(REPO / "fakeplugin").edges, DRIVER_ENTRIES)
    assert not found, "\n".join(found)


def test_an_import_behind_a_face_is_found() -> None:
    """The check can fail: a module outside the GPU driver's home naming one of its modules is reported."""
    edges = [
        Edge("fakeplugin/view/x.py", 3, "fakeplugin.view.x", "fakeplugin.drivers.gpu.publish.node"),
        Edge("fakeplugin/view/x.py", 4, "fakeplugin.view.x", "fakeplugin.drivers.gpu"),
        Edge(
            "fakeplugin/drivers/gpu/plugin.py",
            5,
            "fakeplugin.drivers.gpu.plugin",
            "fakeplugin.drivers.gpu.prepare.smi",
        ),
    ]
    assert behind_faces(edges, DRIVER_ENTRIES) == [
        "fakeplugin/view/x.py:3: imports fakeplugin.drivers.gpu.publish.node, "
        "behind fakeplugin.drivers.gpu's face"
    ]
