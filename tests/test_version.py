"""One version everywhere (docs/support.md): the package's (`fakeplugin.__version__`, which pyproject.toml
reads), `fakeplugin --version`, the chart's `version` and `appVersion`, the image's OCI label, and the
newest section of CHANGELOG.md; and the compatibility table of docs/support.md against the code's tables."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from fakeplugin import __version__, releases
from fakeplugin.cluster import versions
from tests.harness.paths import REPO

SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?")


def versions_found() -> dict[str, str]:
    """Where each place says fakeplugin's version, by place."""
    chart = yaml.safe_load((REPO / "charts/fakeplugin/Chart.yaml").read_text())
    dockerfile = (REPO / "Dockerfile").read_text()
    changelog = (REPO / "CHANGELOG.md").read_text()
    cli = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "--version"], capture_output=True, text=True, check=True
    ).stdout
    return {
        "fakeplugin.__version__": __version__,
        "fakeplugin --version": cli.removeprefix("fakeplugin ").strip(),
        "Chart.yaml version": str(chart["version"]),
        "Chart.yaml appVersion": str(chart["appVersion"]),
        "Dockerfile ARG VERSION": re.search(r"^ARG VERSION=(\S+)$", dockerfile, re.M).group(1),
        "CHANGELOG.md newest": re.search(r"^## \[(\S+)\] - ", changelog, re.M).group(1),
    }


def test_every_place_says_the_same_version() -> None:
    found = versions_found()
    assert SEMVER.fullmatch(__version__), __version__
    assert {place: v for place, v in found.items() if v != __version__} == {}, found


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fakeplugin.__version__"}


def test_the_image_labels_its_version() -> None:
    assert 'org.opencontainers.image.version="${VERSION}"' in (REPO / "Dockerfile").read_text()


def test_the_compatibility_table_names_what_this_version_supports() -> None:
    """docs/support.md's row for this version: the Kubernetes minors of cluster/versions.py (the default
    named), the emulated NVIDIA releases of releases.py (the default named)."""
    text = (REPO / "docs/support.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith(f"| {__version__} |"))
    kubernetes, nvidia = row.split("|")[2:4]
    assert re.findall(r"\b1\.\d\d\b", kubernetes) == list(versions.RELEASES)
    assert f"default: {versions.DEFAULT_VERSION}" in kubernetes
    assert re.findall(r"[\d.]+(?:-dev)?", nvidia.replace("(default)", "")) == list(releases.RELEASES)
    assert f"{releases.DEFAULT_RELEASE} (default)" in nvidia
