"""fakeplugin as a user installs it (`pip install .`; the image installs the same wheel,
hack/image-build-steps.sh): every file of fakeplugin/ in the wheel, and the commands that read package data
working from an installed wheel alone.

- fast: the wheel built from a copy of the files git knows (tracked, and untracked but not ignored: what the
  next commit holds), offline (`pip wheel --no-build-isolation` with the dev venv's setuptools, about 2 s),
  holds exactly fakeplugin/'s files, its links to examples/ and hack/ as the files they point at. A data file
  listed nowhere once went missing: the DCGM XID messages (every scrape of `serve --telemetry-endpoint`
  failed) and the fleet view's page.
- build: that wheel installed into a fresh virtual environment (its dependencies from PyPI, or pip's cache),
  its commands run from a directory outside the checkout: `render` of the packaged seed lab, `serve`'s
  telemetry endpoint and `view`'s page with an API server that refuses connections (both start and serve
  without one), `demo --help`.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.harness.paths import REPO, SEED_LAB

PACKAGE = "fakeplugin"
A5000_NODE = "capi-dralabs-md-gpua5000-jw4mx-d64jz"  # the seed lab's RTX A5000 node (one GPU)
STATIC = {"": "index.html", "view.js": "view.js", "view.css": "view.css"}  # the view's URL paths and files


def git_files() -> list[str]:
    """The files git knows of the checkout (tracked, and untracked ones it does not ignore) that exist."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return sorted({p for p in out.split("\0") if p and os.path.lexists(REPO / p)})


def expected_package_files(known: list[str]) -> set[str]:
    """fakeplugin/'s files as the wheel must hold them: a link to a directory (fakeplugin/examples/kueue ->
    examples/kueue) stands for the files git knows below its target."""
    expected: set[str] = set()
    for path in known:
        if not path.startswith(f"{PACKAGE}/"):
            continue
        if (REPO / path).is_dir():  # a link to a folder (git holds links, never folders)
            target = (REPO / path).resolve().relative_to(REPO).as_posix()
            expected |= {path + p.removeprefix(target) for p in known if p.startswith(target + "/")}
        else:
            expected.add(path)
    return expected


def copy_files(paths: list[str], into: Path) -> None:
    """The files, links kept as links (their relative targets then resolve inside `into`)."""
    for path in paths:
        source, target = REPO / path, into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def known() -> list[str]:
    return git_files()


@pytest.fixture(scope="module")
def wheel(known: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fakeplugin's wheel, built as pip builds it for `pip install .`, from a clean copy of the checkout (a
    build in place would reuse build/, whose stale files could stand in for missing ones)."""
    src = tmp_path_factory.mktemp("src")
    copy_files(known, src)
    # A Go helper as a release's linux wheel carries it (hack/release.sh), left in a working tree (ignored):
    # `pip install .` must not ship it (pyproject's exclude-package-data), whatever lies there.
    stray = src / PACKAGE / "cluster" / "bin" / "fakecri"
    stray.parent.mkdir()
    stray.write_bytes(b"\x7fELF stray build")
    stray.chmod(0o755)
    out = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--no-cache-dir",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (built,) = out.glob("fakeplugin-*.whl")
    return built


def test_the_wheel_holds_every_file_of_the_package(known: list[str], wheel: Path) -> None:
    expected = expected_package_files(known)
    with zipfile.ZipFile(wheel) as archive:
        shipped = {n for n in archive.namelist() if n.startswith(f"{PACKAGE}/")}
        missing, extra = sorted(expected - shipped), sorted(shipped - expected)
        assert missing == [], f"files of fakeplugin/ missing from the wheel (package data): {missing}"
        assert extra == [], f"files in the wheel that git does not know (build output?): {extra}"
        # As the checkout has them; a link as the file it points at (the demo's seed lab, build-k8s.sh).
        differ = [n for n in sorted(shipped) if archive.read(n) != (REPO / n).read_bytes()]
    assert differ == [], f"files in the wheel that differ from the checkout: {differ}"
    assert {"fakeplugin/telemetry/xid-messages.txt", "fakeplugin/view/static/index.html"} <= shipped
    assert {"fakeplugin/examples/seed-lab.yaml", "fakeplugin/examples/kueue/config.yaml"} <= shipped


# ---- build: the wheel installed alone, its commands run outside the checkout ------------------------------


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment (no system site-packages) with the wheel and its dependencies."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    install = subprocess.run(
        [*pip, str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return venv


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The working directory of the installed commands: no fakeplugin/ beside them to import."""
    assert REPO not in tmp_path.parents
    return tmp_path


@pytest.fixture
def user_env() -> dict[str, str]:
    """The environment the commands run in: no PYTHONPATH or PYTHONHOME to reach the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.fixture
def refusing_api(outside: Path) -> Iterator[Path]:
    """A kubeconfig whose API server refuses connections (a bound socket that does not listen): `serve` and
    `view` start, retry their watches, and serve their HTTP endpoints meanwhile."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        path = outside / "kubeconfig"
        path.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: none\n"
            f'clusters: [{{name: none, cluster: {{server: "http://127.0.0.1:{port}"}}}}]\n'
            "users: [{name: none, user: {token: none}}]\n"
            "contexts: [{name: none, context: {cluster: none, user: none}}]\n"
        )
        yield path


def get(url: str) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", parts.path or "/")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


class Started:
    """A long-running command of the venv, its output in a file; stopped by SIGTERM at the end."""

    def __init__(self, argv: list[str | Path], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output())
            if found:
                return found
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no {pattern!r} (exit {self.process.poll()}):\n{self.output()[-6000:]}")

    def stop(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            raise


@pytest.mark.build  # a fresh venv, fakeplugin's dependencies from PyPI (pip's cache): about half a minute
def test_the_installed_wheel_runs_what_reads_package_data(
    installed: Path, outside: Path, user_env: dict[str, str], refusing_api: Path
) -> None:
    python, fakeplugin = installed / "bin" / "python", installed / "bin" / "fakeplugin"

    def run(*argv: str | Path) -> str:
        result = subprocess.run(
            argv, cwd=outside, env=user_env, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
        return result.stdout

    # The package imported is the installed one.
    where = Path(run(python, "-c", "import fakeplugin; print(fakeplugin.__file__)").strip())
    package = where.parent
    assert installed in where.parents and "site-packages" in where.parts, where

    # render: the packaged seed lab (a link to examples/ in the checkout) and the profiles; exactly what the
    # checkout renders.
    shipped_lab = package / "examples" / "seed-lab.yaml"
    assert shipped_lab.is_file() and not shipped_lab.is_symlink()
    rendered = run(fakeplugin, "render", "--inventory", shipped_lab)
    checkout = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "render", "--inventory", str(SEED_LAB)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "kind: ResourceSlice" in rendered and "NVIDIA RTX A5000" in rendered
    assert rendered == checkout

    # serve: its telemetry endpoint, each scrape reading the DCGM field table, the default counters and the
    # XID messages; the kubelet's directories in a temp dir, no kubelet, no PodResources socket.
    kubelet = outside / "k"
    serve = Started(
        [
            fakeplugin,
            "serve",
            "--inventory",
            shipped_lab,
            "--node-name",
            A5000_NODE,
            "--kubeconfig",
            refusing_api,
            "--kubelet-registrar-directory-path",
            kubelet / "r",
            "--kubelet-plugins-directory-path",
            kubelet / "p",
            "--cdi-root",
            kubelet / "cdi",
            "--pod-resources-kubelet-socket",
            kubelet / "none.sock",
            "--healthcheck-port",
            "-1",
            "--telemetry-endpoint",
            "127.0.0.1:0",
        ],
        outside,
        user_env,
        outside / "serve.log",
    )
    try:
        url = serve.wait_for(r"on (http://127\.0\.0\.1:\d+/metrics)").group(1)
        status, body = get(url)
        assert status == 200, f"{status} {body[:2000]!r}\n{serve.output()[-4000:]}"
        status, again = get(url)  # every scrape renders (within its interval: the same render)
        assert status == 200, again[:2000]
    finally:
        serve_exit = serve.stop()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS"} <= set(families)
    (xid,) = families["DCGM_FI_DEV_XID_ERRORS"].samples
    assert xid.value == 0 and xid.labels["err_code"] == "0" and xid.labels["err_msg"] == "No Error"
    assert xid.labels["modelName"] == "NVIDIA RTX A5000" and xid.labels["hostname"] == A5000_NODE
    assert "xid-messages" not in serve.output() and "render failed" not in serve.output()
    assert serve_exit == 0, serve.output()[-4000:]

    # view: its page, script and style, as the checkout has them.
    view = Started(
        [fakeplugin, "view", "--kubeconfig", refusing_api, "--endpoint", "127.0.0.1:0"],
        outside,
        user_env,
        outside / "view.log",
    )
    try:
        page = view.wait_for(r"view: (http://127\.0\.0\.1:\d+/)").group(1)
        served = {name: get(page + path) for path, name in STATIC.items()}
    finally:
        view.stop()
    for name, (status, content) in served.items():
        assert status == 200, f"{name}: {status} {content[:500]!r}\n{view.output()[-4000:]}"
        assert content == (REPO / PACKAGE / "view" / "static" / name).read_bytes(), name
    assert b"<title>fakeplugin: the fleet</title>" in served["index.html"][1]

    # demo: its help (the demo itself needs a local cluster).
    demo = run(fakeplugin, "demo", "--help")
    assert demo.startswith("usage: fakeplugin demo") and "reference lab" in demo
