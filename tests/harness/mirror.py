"""A release mirror on 127.0.0.1, laid out as upstream lays its files out (fakeplugin/cluster/downloads.py):

  k8s/<version>/bin/linux/<arch>/<name>          + <name>.sha256 (the hex digest alone, no newline)
  etcd/<v>/etcd-<v>-linux-<arch>.tar.gz          + etcd/<v>/SHA256SUMS (`<hex>  <file>` lines)
  helm/helm-<v>-linux-<arch>.tar.gz              + <file>.sha256sum (`<hex>  <file>`)

served by http.server in a thread; it records every request path, and cuts off the paths in `cut` (a
Content-Length larger than the body, then the connection closed)."""

from __future__ import annotations

import hashlib
import http.server
import io
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin.cluster import downloads, versions

Content = bytes | Path  # a file's bytes, or a file to serve (a large real binary is linked, not copied)


@dataclass
class Mirror:
    root: Path
    url: str = ""
    requests: list[str] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)

    def env(self) -> dict[str, str]:
        """The variables that point fakeplugin at this mirror."""
        return {
            downloads.K8S_URL_ENV: f"{self.url}/k8s",
            downloads.ETCD_URL_ENV: f"{self.url}/etcd",
            downloads.HELM_URL_ENV: f"{self.url}/helm",
        }


def sha256(content: Content) -> str:
    digest = hashlib.sha256()
    if isinstance(content, bytes):
        digest.update(content)
        return digest.hexdigest()
    with content.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _place(path: Path, content: Content) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.symlink_to(content)


def publish_kube(root: Path, version: str, arch: str, name: str, content: Content) -> Path:
    """A Kubernetes binary and its `.sha256` as dl.k8s.io serves them; the binary's path."""
    path = root / "k8s" / version / "bin" / "linux" / arch / name
    _place(path, content)
    (path.parent / f"{name}.sha256").write_text(sha256(content))  # no newline, as upstream
    return path


def _tarball(path: Path, members: dict[str, Content]) -> None:
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, content in members.items():
            if isinstance(content, Path):
                tar.add(content.resolve(), arcname=name)
                continue
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(content), 0o755
            tar.addfile(info, io.BytesIO(content))


def publish_etcd(root: Path, version: str, arch: str, etcd: Content) -> Path:
    """etcd's release tarball (one top dir: etcd, etcdctl, etcdutl, README, Documentation/) and its line
    in the release's SHA256SUMS; the tarball's path."""
    top = f"etcd-{version}-linux-{arch}"
    path = root / "etcd" / version / f"{top}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    _tarball(
        path,
        {
            f"{top}/Documentation/README.md": b"# etcd docs\n",
            f"{top}/README.md": b"# etcd\n",
            f"{top}/etcd": etcd,
            f"{top}/etcdctl": b"etcdctl\n",
            f"{top}/etcdutl": b"etcdutl\n",
        },
    )
    with (path.parent / "SHA256SUMS").open("a") as sums:
        sums.write(f"{sha256(b'other')}  etcd-{version}-darwin-{arch}.zip\n{sha256(path)}  {path.name}\n")
    return path


def publish_helm(root: Path, version: str, arch: str, helm: Content) -> Path:
    """helm's release tarball (linux-<arch>/helm, LICENSE, README.md) and its `.sha256sum`."""
    path = root / "helm" / f"helm-{version}-linux-{arch}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    _tarball(
        path,
        {
            f"linux-{arch}/LICENSE": b"Apache-2.0\n",
            f"linux-{arch}/README.md": b"helm\n",
            f"linux-{arch}/helm": helm,
        },
    )
    (path.parent / f"{path.name}.sha256sum").write_text(f"{sha256(path)}  {path.name}\n")
    return path


KUBE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl")


def publish_release(root: Path, real: Path, version: str, arch: str) -> None:
    """Everything `fakeplugin demo` downloads for Kubernetes `version`: the real binaries in folder `real`
    (hack/build-k8s.sh's cache) published as dl.k8s.io, etcd's and helm's releases lay them out, at the etcd
    and helm versions fakeplugin pairs with that Kubernetes minor."""
    release = versions.RELEASES[versions.minor_of(version)]
    for name in KUBE:
        publish_kube(root, version, arch, name, real / name)
    publish_etcd(root, release.etcd_release, arch, real / "etcd")
    publish_helm(root, release.helm, arch, real / "helm")


@contextmanager
def serve(root: Path) -> Iterator[Mirror]:
    mirror = Mirror(root)

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def do_GET(self) -> None:
            mirror.requests.append(self.path)
            if self.path not in mirror.cut:
                super().do_GET()
                return
            body = Path(self.translate_path(self.path)).read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + 4096))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    mirror.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
