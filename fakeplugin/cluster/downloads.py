"""The official release binaries, downloaded and verified instead of built (docs/local-cluster.md,
"Binaries: downloaded or built"), each from where upstream publishes it with its SHA-256 beside it:
- Kubernetes: `<base>/<version>/bin/linux/<arch>/<name>`, `<url>.sha256` the hex digest alone
  (kubernetes/release `pkg/release/release.go` WriteChecksums);
- etcd (`etcd_release` of versions.py): `<base>/v<X>/etcd-v<X>-linux-<arch>.tar.gz`, `<base>/v<X>/SHA256SUMS`
  (`<hex>  <file>` lines), the binary `etcd-v<X>-linux-<arch>/etcd` in it;
- helm: `<base>/helm-v<X>-linux-<arch>.tar.gz`, `<url>.sha256sum`, the binary `linux-<arch>/helm` in it.
Never: kwok (its releases publish no checksum; KWOK_URL_ENV is reserved for when they do), fakecri (ours),
pre-release Kubernetes versions, anything with FAKEPLUGIN_OFFLINE=1 (no request at all): hack/build-k8s.sh.

A mirror that does not answer (refused, DNS, CONNECT_TIMEOUT, an HTTP error status) leaves its binaries to
the build, in one log line with the URL and the error. A checksum mismatch, a cut-off download or a checksum
file without the file is a DownloadError naming the file and the URL, never a silent build: the mirror
answered with something other than what upstream published. Nothing of a failed download stays: it is
written to a temp file beside the target (atomicfile's names), verified, made executable and renamed.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import logging
import os
import platform
import re
import shutil
import sys
import tarfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, TextIO
from urllib.parse import urlsplit

from fakeplugin.atomicfile import temp_name
from fakeplugin.cluster import versions

log = logging.getLogger("fakeplugin.cluster")

OFFLINE_ENV = "FAKEPLUGIN_OFFLINE"
K8S_URL_ENV = "FAKEPLUGIN_K8S_RELEASE_URL"
ETCD_URL_ENV = "FAKEPLUGIN_ETCD_RELEASE_URL"
HELM_URL_ENV = "FAKEPLUGIN_HELM_RELEASE_URL"
KWOK_URL_ENV = "FAKEPLUGIN_KWOK_RELEASE_URL"  # not used: kwok publishes no checksum (module docstring)
DEFAULT_URLS = MappingProxyType(
    {
        K8S_URL_ENV: "https://dl.k8s.io/release",
        ETCD_URL_ENV: "https://github.com/etcd-io/etcd/releases/download",
        HELM_URL_ENV: "https://get.helm.sh",
    }
)
KUBE_NAMES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")
DOWNLOADABLE = (*KUBE_NAMES, "etcd", "helm")
CONNECT_TIMEOUT = 5.0  # seconds, for the connection and for each read: a dead mirror is known at once
_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_CHUNK = 1 << 20
_CHECKSUM_MAX = 1 << 16


class DownloadError(RuntimeError):
    """A download that must not be used (checksum mismatch, cut off): names the file and the URL."""


class _Unreachable(Exception):  # no answer from `url`, or not offered there: left to the build
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url


@dataclass(frozen=True)
class Asset:
    """One binary as upstream publishes it: the file, its checksum file, the binary's path in the
    archive (empty when the file is the binary itself)."""

    name: str
    url: str
    checksum_url: str
    member: str = ""

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass
class Fetched:
    """What fetch_all did: the binaries now in the cache, and why each other one is left to the build."""

    fetched: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)


def go_arch(machine: str | None = None) -> str | None:
    """`x86_64` → amd64, `aarch64` → arm64 (this machine's by default); None: no release for it."""
    return _ARCHES.get((machine if machine is not None else platform.machine()).lower())


def asset(name: str, version: str, arch: str, env: Mapping[str, str] = os.environ) -> Asset:
    """Where upstream publishes `name` for Kubernetes `version` on linux/`arch`."""
    release = versions.release(version)
    base = {var: (env.get(var) or url).rstrip("/") for var, url in DEFAULT_URLS.items()}
    if name in KUBE_NAMES:
        url = f"{base[K8S_URL_ENV]}/{version}/bin/linux/{arch}/{name}"
        return Asset(name, url, f"{url}.sha256")
    if name == "etcd":
        top, tag = f"etcd-{release.etcd_release}-linux-{arch}", f"{base[ETCD_URL_ENV]}/{release.etcd_release}"
        return Asset(name, f"{tag}/{top}.tar.gz", f"{tag}/SHA256SUMS", f"{top}/etcd")
    if name == "helm":
        url = f"{base[HELM_URL_ENV]}/helm-{release.helm}-linux-{arch}.tar.gz"
        return Asset(name, url, f"{url}.sha256sum", f"linux-{arch}/helm")
    raise ValueError(f"{name}: no official release is downloaded (downloadable: {', '.join(DOWNLOADABLE)})")


def not_downloaded(version: str, env: Mapping[str, str] = os.environ, machine: str | None = None) -> str:
    """Why nothing of Kubernetes `version` is downloaded here, or "" when it may be."""
    if env.get(OFFLINE_ENV, "").lower() in ("1", "true", "yes"):
        return f"{OFFLINE_ENV}={env[OFFLINE_ENV]}"
    if "-" in version:
        return f"{version} is a pre-release"
    if go_arch(machine) is None:
        return f"no official linux release for this machine ({machine or platform.machine()})"
    return ""


def parse_checksum(text: str, filename: str) -> str:
    """The SHA-256 a checksum file gives `filename`: the hex digest alone (Kubernetes' `.sha256`) or
    `sha256sum` lines `<hex>  <file>` (etcd's SHA256SUMS, helm's `.sha256sum`); ValueError without one."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and len(lines[0]) == 1 and _HEX.match(lines[0][0]):
        return lines[0][0].lower()
    for words in lines:
        if len(words) == 2 and words[1].lstrip("*") == filename and _HEX.match(words[0]):
            return words[0].lower()
    raise ValueError(f"no SHA-256 digest of {filename}")


def _open(url: str) -> http.client.HTTPResponse:
    try:
        return urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise _Unreachable(url, f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:  # refused, DNS, timeout: wrapped by urllib
        raise _Unreachable(url, str(exc.reason)) from None
    except (OSError, http.client.HTTPException) as exc:  # closed before any answer, a timeout on the headers
        raise _Unreachable(url, str(exc) or type(exc).__name__) from None


def _stream(url: str, dest: IO[bytes], what: str, out: TextIO | None, limit: int = 0) -> str:
    """`url` into `dest` (at most `limit` bytes when set), progress on `out`; its SHA-256. DownloadError
    when cut off: fewer bytes than its Content-Length, or the connection reset or silent mid-file."""
    got, quarter, digest = 0, 1, hashlib.sha256()
    with _open(url) as answer:
        header = answer.headers.get("Content-Length", "")
        total = int(header) if header.isdigit() else None
        if out is not None:
            print(f"downloading {what} ({_size(total)}) from {url}", file=out, flush=True)
        while True:
            try:
                chunk = answer.read(_CHUNK)
            except (OSError, http.client.HTTPException) as exc:
                raise DownloadError(f"{what}: download of {url} cut off after {got} bytes: {exc!r}") from None
            if not chunk:
                break
            got += len(chunk)
            if limit and got > limit:
                raise DownloadError(f"{what}: {url} is larger than {limit} bytes: not a checksum file")
            digest.update(chunk)
            dest.write(chunk)
            while out is not None and total and quarter <= 4 and got >= total * quarter / 4:
                print(f"  {what}: {25 * quarter}% ({_size(got)} of {_size(total)})", file=out, flush=True)
                quarter += 1
    if total is not None and got != total:
        raise DownloadError(f"{what}: download of {url} cut off: {got} of {total} bytes (Content-Length)")
    return digest.hexdigest()


def _size(n: int | None) -> str:
    if n is None:
        return "size unknown"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def fetch(item: Asset, bin_dir: Path, out: TextIO | None = None) -> Path:
    """Download `item` into `bin_dir`, verified against its published checksum, progress on `out`
    (default: stderr); the binary's path. Raises DownloadError (nothing left behind) or _Unreachable."""
    sums = io.BytesIO()
    _stream(item.checksum_url, sums, f"{item.name} checksum", None, _CHECKSUM_MAX)
    try:
        expected = parse_checksum(sums.getvalue().decode("utf-8", "replace"), item.filename)
    except ValueError as exc:
        raise DownloadError(f"{item.name}: {item.checksum_url}: {exc}") from None
    bin_dir.mkdir(parents=True, exist_ok=True)
    target = bin_dir / item.name
    download = bin_dir / temp_name(item.filename)
    binary = bin_dir / temp_name(item.name) if item.member else download
    try:
        with open(download, "xb") as dest:
            actual = _stream(item.url, dest, item.name, out or sys.stderr)
        if actual != expected:
            raise DownloadError(
                f"{item.name}: checksum mismatch for {item.filename} downloaded from {item.url}: its SHA-256 "
                f"is {actual}, {item.checksum_url} says {expected}; nothing was kept"
            )
        if item.member:  # an archive: only the one binary comes out of it
            _extract(item, download, binary)
        os.chmod(binary, 0o755)
        os.replace(binary, target)
    finally:
        download.unlink(missing_ok=True)
        binary.unlink(missing_ok=True)
    return target


def _extract(item: Asset, archive: Path, dest: Path) -> None:
    """The one member `item.member` of the verified .tar.gz `archive`, into `dest` (a new file)."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.getmember(item.member)
            source = tar.extractfile(member) if member.isfile() else None
            if source is None:
                raise KeyError(f"{item.member} is not a file")
            with source, open(dest, "xb") as sink:
                shutil.copyfileobj(source, sink, _CHUNK)
    except (KeyError, tarfile.TarError, OSError, EOFError) as exc:
        raise DownloadError(f"{item.name}: {item.url}: cannot extract {item.member} ({exc})") from None


def fetch_all(
    names: Iterable[str],
    bin_dir: Path,
    version: str,
    env: Mapping[str, str] = os.environ,
    out: TextIO | None = None,
    machine: str | None = None,
) -> Fetched:
    """Download those of `names` upstream publishes for Kubernetes `version` into `bin_dir`; the others,
    and all when not_downloaded says why, are left to the build. After a mirror did not answer, its other
    files are not tried (one log line). DownloadError on a checksum mismatch or a cut-off download."""
    result = Fetched()
    wanted = [n for n in names if n in DOWNLOADABLE]
    result.left = {n: "no official release with a published checksum" for n in names if n not in DOWNLOADABLE}
    why = not_downloaded(version, env, machine)
    if why and wanted:
        log.info("not downloading %s: %s", ", ".join(wanted), why)
    arch = go_arch(machine) or ""
    dead: dict[str, str] = {}  # host → why it did not answer
    for name in wanted:
        if why:
            result.left[name] = why
            continue
        item = asset(name, version, arch, env)
        host = urlsplit(item.url).netloc
        if host in dead:
            result.left[name] = dead[host]
            continue
        try:
            fetch(item, bin_dir, out)
        except _Unreachable as exc:
            dead[host] = result.left[name] = f"{exc.url}: {exc}"
            log.warning(
                "could not download %s from %s (%s): it and the rest from there are left to the build",
                name,
                exc.url,
                exc,
            )
            continue
        result.fetched.append(name)
    return result
