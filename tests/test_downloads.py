"""The official release binaries downloaded instead of built (fakeplugin/cluster/downloads.py), from a
mirror on 127.0.0.1 laid out as upstream's (tests/harness/mirror.py): real sockets, real files. The fast
tests serve small stand-in files and never run them; the build-tier test serves the real binaries of
~/.cache/fakeplugin (read only) and runs what it downloaded."""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.cluster import binaries, downloads, machine, versions
from tests.harness import mirror as mirrors
from tests.harness.paths import REPO
from tests.harness.tooling import unavailable

VERSION = "v1.37.2"
ARCH = downloads.go_arch()
RELEASE = versions.release(VERSION)
KUBE = downloads.KUBE_NAMES
DOWNLOADABLE = (*KUBE, "etcd", "helm")


@functools.cache
def content(name: str) -> bytes:
    """A stand-in file for `name`, 1.5 MiB (several chunks), incompressible as a binary is; never run."""
    return f"#!/bin/false\n{name} {VERSION}\n".encode() + random.Random(name).randbytes(3 * 2**19)


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[mirrors.Mirror]:
    """Every downloadable binary of VERSION, as upstream publishes it."""
    if ARCH is None:
        pytest.skip("no official linux release for this machine's architecture")
    root = tmp_path / "mirror"
    for name in KUBE:
        mirrors.publish_kube(root, VERSION, ARCH, name, content(name))
    mirrors.publish_etcd(root, RELEASE.etcd_release, ARCH, content("etcd"))
    mirrors.publish_helm(root, RELEASE.helm, ARCH, content("helm"))
    with mirrors.serve(root) as served:
        yield served


def env_for(tmp_path: Path, mirror: mirrors.Mirror | None = None, **more: str) -> dict[str, str]:
    return {"FAKEPLUGIN_CACHE": str(tmp_path / "cache"), **(mirror.env() if mirror else {}), **more}


def bin_dir(tmp_path: Path, version: str = VERSION) -> Path:
    return tmp_path / "cache" / "k8s" / version / "bin"


def leftovers(tmp_path: Path) -> list[str]:
    where = bin_dir(tmp_path)
    return sorted(os.listdir(where)) if where.exists() else []


def test_urls_are_where_upstream_publishes() -> None:
    env = {downloads.K8S_URL_ENV: "http://m/k8s/"}
    api = downloads.asset("kube-apiserver", VERSION, "arm64", env)
    assert (api.url, api.checksum_url, api.member) == (
        "http://m/k8s/v1.37.2/bin/linux/arm64/kube-apiserver",
        "http://m/k8s/v1.37.2/bin/linux/arm64/kube-apiserver.sha256",
        "",
    )
    etcd = downloads.asset("etcd", "v1.34.4", "amd64", {})
    assert (etcd.url, etcd.checksum_url, etcd.member) == (
        "https://github.com/etcd-io/etcd/releases/download/v3.6.5/etcd-v3.6.5-linux-amd64.tar.gz",
        "https://github.com/etcd-io/etcd/releases/download/v3.6.5/SHA256SUMS",
        "etcd-v3.6.5-linux-amd64/etcd",
    )
    helm = downloads.asset("helm", VERSION, "amd64", {})
    assert (helm.url, helm.checksum_url, helm.member) == (
        "https://get.helm.sh/helm-v3.22.0-linux-amd64.tar.gz",
        "https://get.helm.sh/helm-v3.22.0-linux-amd64.tar.gz.sha256sum",
        "linux-amd64/helm",
    )
    assert downloads.asset("kubectl", VERSION, "amd64", {}).url == (
        "https://dl.k8s.io/release/v1.37.2/bin/linux/amd64/kubectl"
    )
    # kubeadm's DefaultEtcdVersion at each row's tag (the build makes its own etcd, `etcd`).
    assert {r.minor: r.etcd_release for r in versions.RELEASES.values()} == {
        "1.34": "v3.6.5", "1.35": "v3.6.6", "1.36": "v3.6.8", "1.37": "v3.7.0", "1.38": "v3.7.1",
    }  # fmt: skip
    assert (downloads.go_arch("x86_64"), downloads.go_arch("aarch64"), downloads.go_arch("riscv64")) == (
        "amd64",
        "arm64",
        None,
    )
    for name in ("kwok", "fakecri"):
        with pytest.raises(ValueError, match=f"{name}: no official release is downloaded"):
            downloads.asset(name, VERSION, "amd64", {})


def test_checksum_files_as_upstream_writes_them() -> None:
    digest = "ab" * 32
    assert downloads.parse_checksum(digest, "kubelet") == digest  # Kubernetes: the digest, no newline
    assert downloads.parse_checksum(f"{digest.upper()}\n", "kubelet") == digest
    sums = f"{'cd' * 32}  etcd-v3.7.0-linux-arm64.tar.gz\n{digest}  etcd-v3.7.0-linux-amd64.tar.gz\n"
    assert downloads.parse_checksum(sums, "etcd-v3.7.0-linux-amd64.tar.gz") == digest
    with pytest.raises(ValueError, match=r"no SHA-256 digest of etcd-v3\.7\.0-linux-s390x\.tar\.gz"):
        downloads.parse_checksum(sums, "etcd-v3.7.0-linux-s390x.tar.gz")
    with pytest.raises(ValueError, match="no SHA-256 digest of helm"):
        downloads.parse_checksum("<html>Not Found</html>", "helm")


def test_every_downloadable_binary_is_fetched_verified_and_executable(
    tmp_path: Path, mirror: mirrors.Mirror, capsys: pytest.CaptureFixture[str]
) -> None:
    got = binaries.fetch((*binaries.CLUSTER_BINARIES, "helm"), env_for(tmp_path, mirror), VERSION)
    assert sorted(got.fetched) == sorted(DOWNLOADABLE)
    assert got.left == {n: "no official release with a published checksum" for n in ("fakecri", "kwok")}
    for name in DOWNLOADABLE:
        path = bin_dir(tmp_path) / name
        assert path.read_bytes() == content(name), name
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, name
    assert leftovers(tmp_path) == sorted(DOWNLOADABLE)  # no temp file, no archive, no etcdctl
    etcd = f"/etcd/{RELEASE.etcd_release}"
    helm = f"/helm/helm-{RELEASE.helm}-linux-{ARCH}.tar.gz"
    kube = f"/k8s/{VERSION}/bin/linux/{ARCH}"
    assert sorted(mirror.requests) == sorted(
        [f"{kube}/{n}{suffix}" for n in KUBE for suffix in ("", ".sha256")]
        + [f"{etcd}/SHA256SUMS", f"{etcd}/etcd-{RELEASE.etcd_release}-linux-{ARCH}.tar.gz"]
        + [f"{helm}.sha256sum", helm]
    )
    err = capsys.readouterr().err
    assert f"downloading kube-apiserver (1.5 MiB) from {mirror.url}{kube}/kube-apiserver\n" in err
    assert "  kube-apiserver: 50% (" in err and "  kube-apiserver: 100% (1.5 MiB of 1.5 MiB)\n" in err
    assert len(err.splitlines()) == 5 * len(DOWNLOADABLE)  # a line per file and four of progress
    # Present now: nothing is asked again.
    mirror.requests.clear()
    assert binaries.fetch(binaries.CLUSTER_BINARIES, env_for(tmp_path, mirror), VERSION).fetched == []
    assert mirror.requests == []


def test_a_tampered_checksum_is_an_error_naming_file_and_url_and_nothing_stays(
    tmp_path: Path, mirror: mirrors.Mirror
) -> None:
    kube = mirror.root / "k8s" / VERSION / "bin" / "linux" / str(ARCH)
    (kube / "kubelet.sha256").write_text("0" * 64)
    with pytest.raises(downloads.DownloadError) as error:
        binaries.fetch(("kubelet",), env_for(tmp_path, mirror), VERSION)
    url = f"{mirror.url}/k8s/{VERSION}/bin/linux/{ARCH}/kubelet"
    assert str(error.value).startswith(f"kubelet: checksum mismatch for kubelet downloaded from {url}: ")
    assert f"{url}.sha256 says {'0' * 64}; nothing was kept" in str(error.value)
    assert leftovers(tmp_path) == []
    # An archive: etcd's SHA256SUMS naming another digest for the tarball.
    sums = mirror.root / "etcd" / RELEASE.etcd_release / "SHA256SUMS"
    tarball = f"etcd-{RELEASE.etcd_release}-linux-{ARCH}.tar.gz"
    sums.write_text(f"{'1' * 64}  {tarball}\n")
    with pytest.raises(downloads.DownloadError, match=f"etcd: checksum mismatch for {re.escape(tarball)} "):
        binaries.fetch(("etcd",), env_for(tmp_path, mirror), VERSION)
    assert leftovers(tmp_path) == []
    # A checksum file that names no such file: an error too, not a build.
    sums.write_text(f"{'1' * 64}  etcd-{RELEASE.etcd_release}-darwin-{ARCH}.zip\n")
    with pytest.raises(downloads.DownloadError, match=f"etcd: {mirror.url}/etcd/.*/SHA256SUMS: no SHA-256"):
        binaries.fetch(("etcd",), env_for(tmp_path, mirror), VERSION)
    assert leftovers(tmp_path) == []


def test_a_cut_off_download_is_an_error_and_nothing_stays(tmp_path: Path, mirror: mirrors.Mirror) -> None:
    path = f"/helm/helm-{RELEASE.helm}-linux-{ARCH}.tar.gz"
    mirror.cut.add(path)
    with pytest.raises(downloads.DownloadError) as error:
        binaries.fetch(("helm",), env_for(tmp_path, mirror), VERSION)
    size = (mirror.root / path.lstrip("/")).stat().st_size
    assert str(error.value) == (
        f"helm: download of {mirror.url}{path} cut off: {size // 2} of {size + 4096} bytes (Content-Length)"
    )
    assert leftovers(tmp_path) == []
    mirror.cut = {f"/k8s/{VERSION}/bin/linux/{ARCH}/kubectl"}
    with pytest.raises(downloads.DownloadError, match=r"^kubectl: download of http://127\.0\.0\.1:\d+/k8s/"):
        binaries.fetch(("kubectl",), env_for(tmp_path, mirror), VERSION)
    assert leftovers(tmp_path) == []


def test_an_unreachable_mirror_leaves_the_binaries_to_the_build_at_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    env = env_for(tmp_path, **dict.fromkeys(downloads.DEFAULT_URLS, url))
    start = time.monotonic()
    with caplog.at_level(logging.INFO, "fakeplugin.cluster"), closed:
        got = binaries.fetch(DOWNLOADABLE, env, VERSION)
    assert time.monotonic() - start < 3
    assert got.fetched == []
    first = f"{url}/{VERSION}/bin/linux/{ARCH}/kube-apiserver.sha256"
    assert set(got.left) == set(DOWNLOADABLE)
    assert all(why.startswith(f"{first}: ") and "Connection refused" in why for why in got.left.values())
    # One line, with the URL and the error; the host is not asked again for the other files.
    assert [r.getMessage() for r in caplog.records] == [
        f"could not download kube-apiserver from {first} ({got.left['kube-apiserver'][len(first) + 2 :]}): "
        "it and the rest from there are left to the build"
    ]
    assert leftovers(tmp_path) == []


def test_a_mirror_that_does_not_answer_is_given_up_after_the_timeout(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        got = binaries.fetch(("kubectl",), env_for(tmp_path, **{downloads.K8S_URL_ENV: url}), VERSION)
        took = time.monotonic() - start
    assert downloads.CONNECT_TIMEOUT <= took < downloads.CONNECT_TIMEOUT + 3
    assert got.fetched == [] and "timed out" in got.left["kubectl"], got.left
    assert leftovers(tmp_path) == []


def test_a_mirror_without_the_file_leaves_it_to_the_build(tmp_path: Path, mirror: mirrors.Mirror) -> None:
    got = binaries.fetch(("kubectl",), env_for(tmp_path, mirror), "v1.37.1")  # not on this mirror
    assert got.fetched == []
    assert got.left["kubectl"] == (
        f"{mirror.url}/k8s/v1.37.1/bin/linux/{ARCH}/kubectl.sha256: HTTP 404 File not found"
    )


def test_offline_sends_no_request(tmp_path: Path, mirror: mirrors.Mirror) -> None:
    got = binaries.fetch(DOWNLOADABLE, env_for(tmp_path, mirror, FAKEPLUGIN_OFFLINE="1"), VERSION)
    assert got.fetched == [] and set(got.left.values()) == {"FAKEPLUGIN_OFFLINE=1"}
    assert mirror.requests == []
    assert leftovers(tmp_path) == []


def test_a_pre_release_is_built_not_downloaded(tmp_path: Path, mirror: mirrors.Mirror) -> None:
    version = versions.RELEASES["1.38"].newest
    assert "-" in version
    got = binaries.fetch(DOWNLOADABLE, env_for(tmp_path, mirror), version)
    assert got.fetched == [] and set(got.left.values()) == {f"{version} is a pre-release"}
    assert mirror.requests == []


def test_overridden_locations_are_never_fetched(tmp_path: Path, mirror: mirrors.Mirror) -> None:
    env = env_for(tmp_path, mirror, KUBEBUILDER_ASSETS=str(tmp_path / "assets"))
    assert binaries.fetch(DOWNLOADABLE, env, VERSION).fetched == []
    assert mirror.requests == []


def test_cluster_up_downloads_then_names_only_what_must_be_built(
    tmp_path: Path, mirror: mirrors.Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `cluster up`, the demo and the pytest plugin go through: downloaded first, and without
    --build, the error names only what no release provides; `cluster build` of the downloadable ones
    runs no build script at all (it would fail this tier's guard)."""
    for key, value in env_for(tmp_path, mirror).items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(downloads.OFFLINE_ENV, raising=False)  # the fast tier sets it
    with pytest.raises(binaries.BinaryNotFound) as missing:
        machine.find_binaries(build=False, version=VERSION)
    lines = str(missing.value).splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:-1]] == ["fakecri", "kwok"]
    assert lines[-1].endswith("`fakeplugin cluster build --only fakecri,kwok`")
    assert leftovers(tmp_path) == sorted(set(DOWNLOADABLE) - {"helm"})
    assert binaries.build(["helm", "kubelet"], VERSION) == 0
    assert (bin_dir(tmp_path) / "helm").read_bytes() == content("helm")


def test_the_fast_tier_and_ci_are_offline() -> None:
    assert os.environ.get(downloads.OFFLINE_ENV) == "1"  # tests/harness/tiers.py, for every fast test
    script = (REPO / "hack" / "test.sh").read_text()
    assert "\nexport FAKEPLUGIN_OFFLINE=1\n" in script


@pytest.mark.build
def test_the_real_release_binaries_are_downloaded_and_run_without_go(tmp_path: Path) -> None:
    """A mirror of the real binaries hack/build-k8s.sh made for VERSION (read, never written), published as
    upstream publishes them; `fakeplugin cluster build` of the downloadable ones into a fresh cache, with no
    go on PATH; then the downloaded binaries run."""
    real = Path.home() / ".cache" / "fakeplugin" / "k8s" / VERSION / "bin"
    if ARCH is None or not all((real / n).is_file() for n in DOWNLOADABLE):
        unavailable(f"the real binaries of {VERSION} are not built in {real} (hack/build-k8s.sh)")
    root = tmp_path / "mirror"
    for name in KUBE:
        mirrors.publish_kube(root, VERSION, ARCH, name, real / name)
    mirrors.publish_etcd(root, RELEASE.etcd_release, ARCH, real / "etcd")
    mirrors.publish_helm(root, RELEASE.helm, ARCH, real / "helm")
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "go").exists())
    cache = tmp_path / "cache"
    with mirrors.serve(root) as mirror:
        env = {**os.environ, **mirror.env(), "PATH": path, "FAKEPLUGIN_CACHE": str(cache)}
        env.pop(downloads.OFFLINE_ENV, None)
        run = subprocess.run(
            [sys.executable, "-m", "fakeplugin", "cluster", "build", "--kubernetes-version", VERSION,
             "--only", ",".join(DOWNLOADABLE)],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "[build-k8s" not in run.stderr  # nothing built
    for name in DOWNLOADABLE:
        assert f"downloading {name} (" in run.stderr
    got = cache / "k8s" / VERSION / "bin"
    assert sorted(os.listdir(got)) == sorted(DOWNLOADABLE)

    def output(*argv: str | Path) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout

    assert output(got / "kube-apiserver", "--version").strip() == f"Kubernetes {VERSION}"
    assert f"Client Version: {VERSION}" in output(got / "kubectl", "version", "--client")
    # The mirror's file is the build's etcd, published under the release's name.
    assert f"etcd Version: {RELEASE.etcd.lstrip('v')}" in output(got / "etcd", "--version")
    assert output(got / "helm", "version", "--short").startswith(RELEASE.helm)
