"""Reference data written in more than one place agrees with its source: the serve flags' defaults and the
server's, the inventory field tables and fakeplugin.releases, the kind version, the Kubernetes default and
matrix of fakeplugin.cluster.versions where docs and help texts repeat them."""

from __future__ import annotations

import inspect
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakeplugin import releases
from fakeplugin.cli import build_parser
from fakeplugin.cluster import versions
from fakeplugin.inventory import fields
from fakeplugin.runtime import bootid
from fakeplugin.server import app

REPO = Path(__file__).resolve().parents[1]
FIELD_ROW = re.compile(r"^\| ((?:`[^`]+`(?:, )?)+) \|(.*)$", re.MULTILINE)
K8S_VERSION = r"v1\.[2-9][0-9]\.[0-9]+"  # a Kubernetes version (two-digit minor), not v1.1.0 of CDI


def read(path: str) -> str:
    return (REPO / path).read_text()


def test_serve_defaults_are_the_servers_and_the_runtimes(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("KUBELET_REGISTRAR_DIRECTORY_PATH", "KUBELET_PLUGINS_DIRECTORY_PATH", "BOOT_ID_FILE"):
        monkeypatch.delenv(env, raising=False)  # the flags' defaults come from the environment first
    args = build_parser().parse_args(["serve"])
    assert Path(args.kubelet_registrar_directory_path) == app.KUBELET_REGISTRY_DIR
    assert Path(args.kubelet_plugins_directory_path) == app.KUBELET_PLUGINS_DIR
    assert Path(args.boot_id_file) == bootid.BOOT_ID_FILE
    assert inspect.signature(bootid.read_boot_id).parameters["path"].default == bootid.BOOT_ID_FILE


def field_rows(text: str) -> dict[str, str]:
    """Field → the rest of its row in the inventory field table (`| field | type | default | meaning |`);
    a row of two fields (`nodes[].gpus[].uuid`, `pciBusID`) gives both."""
    lines = text[text.index("| field | type | default | meaning |") :].splitlines()
    table = "\n".join(itertools.takewhile(lambda line: line.startswith("|"), lines))
    rows = {}
    for names, rest in FIELD_ROW.findall(table):
        first, *more = re.findall(r"`([^`]+)`", names)
        rows[first] = rest
        parent = first.rsplit(".", 1)[0] + "." if "." in first else ""
        rows.update({parent + name: rest for name in more})
    return rows


@pytest.mark.parametrize(
    "table",
    [
        pytest.param(fields.__doc__ or "", id="inventory/fields.py"),
        pytest.param(read("docs/inventory.md"), id="docs/inventory.md"),
    ],
)
def test_the_inventory_field_tables_name_every_release_and_the_default(table: str) -> None:
    row = field_rows(table)["driverRelease"]
    _, default, meaning = row.split("|")[:3]
    assert default.strip() == f'`"{releases.DEFAULT_RELEASE}"`'
    named = re.findall(r"`([0-9][^`]*)`", meaning)
    assert named == list(releases.RELEASES)


def test_the_docs_inventory_fields_are_those_of_the_modules_table() -> None:
    module = field_rows(fields.__doc__ or "")
    documented = set(field_rows(read("docs/inventory.md")))
    assert "nodes[].gpus[].pciBusID" in documented
    assert documented - set(module) == set()


def lib_sh_default(name: str) -> str:
    (value,) = re.findall(rf'^{name}="\$\{{{name}:-(v[0-9.]+)\}}"$', read("hack/kind/lib.sh"), re.MULTILINE)
    return value


def test_one_kind_version_the_one_hack_kind_builds() -> None:
    kind = lib_sh_default("KIND_VERSION")
    workflow = read(".github/workflows/kind.yaml")
    assert not re.search(r"^\s*KIND_VERSION:", workflow, re.MULTILINE), "it takes hack/kind/lib.sh's"
    install = workflow.index('go install "sigs.k8s.io/kind@${KIND_VERSION}"')
    assert workflow.rindex("source hack/kind/lib.sh", 0, install) < install
    assert set(re.findall(r"kind (v0\.[0-9]+\.[0-9]+)", read("docs/kind.md"))) == {kind}


def test_the_kind_scripts_take_the_kubernetes_default_from_the_table() -> None:
    out = subprocess.run(
        ["bash", "-c", 'unset K8S_VERSION; source hack/kind/lib.sh && echo "$K8S_VERSION"'],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == versions.DEFAULT_VERSION


def test_the_scripts_list_versions_from_the_table() -> None:
    def listed(command: str) -> list[str]:
        table = REPO / "fakeplugin" / "cluster" / "versions.py"
        out = subprocess.run(
            [sys.executable, str(table), command], capture_output=True, text=True, check=True
        )
        return out.stdout.splitlines()

    assert versions.matrix() == ["v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2", "v1.38.0-beta.0"]
    assert listed("matrix") == versions.matrix()
    # The default: the newest minor with a release; 1.38's beta is in the matrix only.
    assert listed("default") == [versions.DEFAULT_VERSION] == listed("newest") == ["v1.37.2"]
    # CI's second version: the seed lab's line.
    assert listed("seed") == [versions.SEED_VERSION] == ["v1.35.4"]


def test_the_scripts_write_no_kubernetes_version_of_their_own() -> None:
    # Not hack/kind/lib.sh (crictl's versions look like Kubernetes'; its default: the test above) nor
    # hack/matrix.sh (its usage has an example).
    for script in (".ci/run", "hack/test.sh", "hack/build-k8s.sh"):
        assert re.findall(K8S_VERSION, read(script)) == [], script
    assert "mapfile -t VERSIONS < <(python3 fakeplugin/cluster/versions.py matrix)" in read("hack/matrix.sh")
    assert 'SEED_K8S="$(python3 fakeplugin/cluster/versions.py seed)"' in read("hack/test.sh")


TEXTS = sorted(
    str(p.relative_to(REPO))
    for pattern in ("README.md", "docs/*.md", "fakeplugin/**/*.py", "hack/**/*.sh")
    for p in REPO.glob(pattern)
    if p.name != "versions.py"
)


def test_every_text_naming_the_default_kubernetes_version_names_the_tables() -> None:
    mentions = {
        (path, version)
        for path in TEXTS
        for version in re.findall(
            rf"(?:default:?|else) ({K8S_VERSION})|({K8S_VERSION}) \(default\)", read(path)
        )
    }
    found = {(path, next(v for v in pair if v)) for path, pair in mentions}
    assert {path for path, _ in found} >= {"docs/testing.md", "fakeplugin/testing/pytest_plugin.py"}
    assert {(path, v) for path, v in found if v != versions.DEFAULT_VERSION} == set()


def test_the_docs_and_help_list_the_tables_matrix() -> None:
    matrix = versions.matrix()
    checked = ", ".join(f"{v} (default)" if v == versions.DEFAULT_VERSION else v for v in matrix)
    assert f"Checked: **{checked}**" in read("docs/kubernetes-versions.md")
    epilog = " ".join(read("fakeplugin/commands/cluster.py").split())
    assert f"serves ({', '.join(matrix)} checked), default {versions.DEFAULT_VERSION};" in epilog
