"""hack/release.sh, the release's files (CONTRIBUTING.md, "Making a release"): run twice on one commit (a
clone of HEAD, so the working tree does not matter) without the image, the two folders must be the same
bytes; the linux wheels carry fakecri and kwok for their platform, and the x86_64 one, installed with no Go
and an empty cache, finds its fakecri and kwok and runs them.

build tier: Go cross-compiles kwok and fakecri for amd64 and arm64 (cold, about 4 minutes on 2 cores; the
second run comes from Go's build cache), helm packages the chart, the build tools and the wheel's
dependencies come from PyPI (or pip's cache).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import fakeplugin
from fakeplugin.cluster import binaries, downloads, versions
from tests.harness import mirror as mirrors
from tests.harness.host import require_cluster_host
from tests.harness.paths import REPO
from tests.harness.tooling import tool, unavailable

pytestmark = [pytest.mark.build, pytest.mark.timeout(1800)]

VERSION = fakeplugin.__version__
IMAGE = "ghcr.io/example/fakeplugin"
PLATFORMS = {  # the wheel's platform tags: the ELF machine of its helpers (e_machine, bytes 18-19)
    "manylinux_2_17_x86_64.manylinux2014_x86_64": (0x3E, "x86-64"),
    "manylinux_2_17_aarch64.manylinux2014_aarch64": (0xB7, "AArch64"),
}
HELPERS = ("fakecri", "kwok")
DIST_INFO = f"fakeplugin-{VERSION}.dist-info"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Release:
    clone: Path
    runs: tuple[Path, Path]  # the two --out folders


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    if shutil.which("go") is None:
        unavailable("go not found on PATH: hack/release.sh cross-compiles fakecri and kwok")
    helm = tool("helm")
    root = tmp_path_factory.mktemp("release")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    clone = root / "clone"
    subprocess.run(
        ["git", "clone", "--quiet", "--no-checkout", "--shared", str(REPO), str(clone)], check=True
    )
    subprocess.run(["git", "checkout", "--quiet", "--detach", head], cwd=clone, check=True)
    env = {**os.environ, "HELM": str(helm)}
    runs = []
    for n in (1, 2):
        out = root / f"dist{n}"
        start = time.monotonic()
        done = subprocess.run(
            ["bash", "hack/release.sh", "--no-image", "--out", str(out), "--image-repository", IMAGE],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
        assert done.returncode == 0, f"run {n}:\n{done.stdout}\n{done.stderr[-8000:]}"
        print(f"hack/release.sh run {n}: {time.monotonic() - start:.0f} s")  # shown with -s or -rP
        runs.append(out)
    return Release(clone, (runs[0], runs[1]))


def expected_files() -> list[str]:
    return sorted(
        [
            f"fakeplugin-{VERSION}.tar.gz",
            f"fakeplugin-{VERSION}.tgz",
            f"fakeplugin-{VERSION}-py3-none-any.whl",
            *(f"fakeplugin-{VERSION}-py3-none-{tags}.whl" for tags in PLATFORMS),
        ]
    )


def test_two_runs_on_one_commit_give_the_same_files_and_sums(release: Release) -> None:
    first, second = release.runs
    for out in release.runs:
        assert sorted(p.name for p in out.iterdir()) == sorted([*expected_files(), "SHA256SUMS"])
        # sha256sum's format, sorted by name, every file but itself.
        lines = (out / "SHA256SUMS").read_text().splitlines()
        assert [line.split("  ", 1)[1] for line in lines] == expected_files()
        assert lines == [f"{sha256(out / name)}  {name}" for name in expected_files()]
    differ = [n for n in expected_files() if sha256(first / n) != sha256(second / n)]
    assert differ == [], f"not reproducible: {differ}"
    assert (first / "SHA256SUMS").read_bytes() == (second / "SHA256SUMS").read_bytes()


def test_the_linux_wheels_carry_the_helpers_of_their_platform(release: Release) -> None:
    out = release.runs[0]
    with zipfile.ZipFile(out / f"fakeplugin-{VERSION}-py3-none-any.whl") as pure:
        pure_names = set(pure.namelist())
        assert "Root-Is-Purelib: true\nTag: py3-none-any\n" in pure.read(f"{DIST_INFO}/WHEEL").decode()
    assert not any(n.startswith("fakeplugin/cluster/bin/") for n in pure_names)
    for tags, (machine, arch) in PLATFORMS.items():
        with zipfile.ZipFile(out / f"fakeplugin-{VERSION}-py3-none-{tags}.whl") as wheel:
            wheel_file = wheel.read(f"{DIST_INFO}/WHEEL").decode()
            headers = wheel_file.split("\n\n")[0].splitlines()  # an email header block: no blank line in it
            assert "Root-Is-Purelib: false" in headers and "Root-Is-Purelib: true" not in headers
            assert [h for h in headers if h.startswith("Tag:")] == [
                f"Tag: py3-none-{t}" for t in tags.split(".")
            ]
            helpers = {f"fakeplugin/cluster/bin/{name}" for name in HELPERS}
            assert set(wheel.namelist()) == pure_names | helpers
            for name in sorted(helpers):
                info = wheel.getinfo(name)
                assert (info.external_attr >> 16) & 0o777 == 0o755, f"{tags} {name}"
                head = wheel.open(name).read(20)
                assert head[:4] == b"\x7fELF" and head[4] == 2, f"{name}: no 64-bit ELF"
                assert int.from_bytes(head[18:20], "little") == machine, f"{tags} {name}: not {arch}"
            record = wheel.read(f"{DIST_INFO}/RECORD").decode().splitlines()
            assert {line.split(",")[0] for line in record} == set(wheel.namelist())


def test_the_sdist_is_the_commit_and_the_chart_runs_this_release_image(release: Release) -> None:
    out = release.runs[0]
    with tarfile.open(out / f"fakeplugin-{VERSION}.tar.gz") as sdist:
        names = sdist.getnames()
        top = f"fakeplugin-{VERSION}"
        assert f"{top}/pyproject.toml" in names and f"{top}/fakeplugin/cluster/binaries.py" in names
        assert not any("/cluster/bin/" in n for n in names)
        assert {m.mtime for m in sdist.getmembers()} == {int(commit_time(release.clone))}
    with tarfile.open(out / f"fakeplugin-{VERSION}.tgz") as chart:
        values = yaml.safe_load(chart.extractfile("fakeplugin/values.yaml").read())
        meta = yaml.safe_load(chart.extractfile("fakeplugin/Chart.yaml").read())
        with (REPO / "charts" / "fakeplugin" / "values.yaml").open() as source:
            theirs = yaml.safe_load(source)
    assert values["image"] == {**theirs["image"], "repository": IMAGE, "tag": VERSION}
    assert {k: v for k, v in values.items() if k != "image"} == {
        k: v for k, v in theirs.items() if k != "image"
    }
    assert (meta["version"], meta["appVersion"]) == (VERSION, VERSION)


def commit_time(clone: Path) -> str:
    return subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout.strip()


@dataclass(frozen=True)
class Installed:
    """The release's x86_64 wheel installed into a fresh virtualenv, and an environment as a user's with no
    Go: PATH without `go` (the venv's bin first), nothing pointing at other binaries."""

    venv: Path
    env: dict[str, str]

    def with_cache(self, cache: Path) -> dict[str, str]:
        cache.mkdir(exist_ok=True)
        return {**self.env, "FAKEPLUGIN_CACHE": str(cache)}


@pytest.fixture(scope="module")
def installed(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    (wheel,) = release.runs[0].glob("*x86_64*.whl")
    venv = tmp_path_factory.mktemp("installed") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    path = os.pathsep.join(
        [str(venv / "bin")]
        + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "go").exists()]
    )
    assert shutil.which("go", path=path) is None
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TEST_ASSET_")
        and k not in ("KUBEBUILDER_ASSETS", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", downloads.OFFLINE_ENV)
    }
    return Installed(venv, {**env, "PATH": path})


def test_the_installed_x86_64_wheel_finds_and_runs_its_own_fakecri(
    installed: Installed, tmp_path: Path
) -> None:
    # An empty cache: only the package's own helpers can be found.
    cache = tmp_path / "cache"
    env = installed.with_cache(cache)
    venv = installed.venv
    found = subprocess.run(
        [
            venv / "bin" / "python",
            "-c",
            "from fakeplugin.cluster import binaries\nfor n in ('fakecri', 'kwok'): print(binaries.find(n))",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr
    fakecri, kwok = (Path(line) for line in found.stdout.splitlines())
    assert venv in fakecri.parents and fakecri.parent.parts[-3:] == ("fakeplugin", "cluster", "bin"), fakecri
    assert kwok == fakecri.parent / "kwok"
    # Its usage, without serving anything (no --socket): Go's flag package answers -help and exits 0.
    usage = subprocess.run(
        [fakecri, "-help"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert usage.returncode == 0, usage.stderr
    assert "-socket" in usage.stderr and "-output-dir" in usage.stderr
    kwok_usage = subprocess.run([kwok, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert kwok_usage.returncode == 0 and "Usage:" in kwok_usage.stdout, kwok_usage.stderr
    # No cache to fall back from for anything else: etcd is still missing, named with the cache's path.
    missing = subprocess.run(
        [venv / "bin" / "python", "-c", "from fakeplugin.cluster import binaries; binaries.find_all()"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1
    assert f"etcd: no executable at {cache}/k8s/" in missing.stderr
    assert "fakecri:" not in missing.stderr and "kwok:" not in missing.stderr


@pytest.mark.cluster
def test_the_installed_wheel_runs_the_demo_with_binaries_from_a_release_mirror(installed: Installed) -> None:
    """A user's first cluster (docs/install.md): `fakeplugin demo` of the installed wheel, an empty cache and
    no Go, downloads the Kubernetes components, etcd and helm from a mirror on 127.0.0.1 (our own builds as
    upstream publishes them), verifies them and runs the reference lab."""
    version = versions.DEFAULT_VERSION
    real = require_cluster_host((*binaries.CLUSTER_BINARIES, "helm"))
    with tempfile.TemporaryDirectory(prefix="fprel-", dir="/tmp") as short:  # unix socket paths are short
        root = Path(short)
        mirrors.publish_release(root / "mirror", real["kube-apiserver"].parent, version, "amd64")
        env = installed.with_cache(root / "cache")
        with mirrors.serve(root / "mirror") as mirror:
            demo = subprocess.run(
                ["fakeplugin", "demo", "--state-dir", str(root / "state")],
                env={**env, **mirror.env()},
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            fetched = sorted(mirror.requests)
        assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-5000:]
        # The demo's own report: the three classes, the lab's GPUs, Scenario I's two containers on one GPU.
        assert re.search(r"capi-dralabs-md-gpua5000-jw4mx-d64jz\s+gpu-0\s+NVIDIA RTX A5000\s", demo.stdout)
        assert "1 pod(s) Running: shared-gpu" in demo.stdout
        # Every binary the cluster runs came from the mirror with its checksum, into the cache, and nothing
        # else (helm only for add-ons).
        etcd = versions.RELEASES[versions.minor_of(version)].etcd_release
        k8s = f"/k8s/{version}/bin/linux/amd64"
        assert set(fetched) == {
            *(f"{k8s}/{name}{ext}" for name in mirrors.KUBE for ext in ("", ".sha256")),
            f"/etcd/{etcd}/etcd-{etcd}-linux-amd64.tar.gz",
            f"/etcd/{etcd}/SHA256SUMS",
        }, fetched
        cached = root / "cache" / "k8s" / version / "bin"
        for name in (*mirrors.KUBE, "etcd"):
            assert mirrors.sha256(cached / name) == mirrors.sha256(real[name]), name
        # Progress, naming what and from where.
        progress = rf"downloading kube-apiserver \(.+\) from {re.escape(mirror.url + k8s)}/kube-apiserver\n"
        assert re.search(progress, demo.stdout + demo.stderr), demo.stderr[-3000:]
