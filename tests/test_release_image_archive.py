"""hack/release-files.py oci-archive: the release's image archive is an OCI image layout that `docker load`
still reads, whichever Docker engine saved it (docker 20.10 writes only docker's own format). The kind tier
loads the converted archive of the real image with Debian's docker 20.10 and containerd (run.sh --release)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.harness.paths import REPO

SCRIPT = REPO / "hack" / "release-files.py"
EPOCH = "1796540845"


def tar_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def docker_archive(path: Path, tags: list[str], images: int = 1) -> tuple[bytes, list[bytes]]:
    """What docker 20.10's `docker save` writes: <id>/layer.tar per layer, <config digest>.json,
    manifest.json; the config and the layers."""
    layers = [tar_bytes({"etc/one": b"1\n"}), tar_bytes({"usr/bin/two": b"#!/bin/sh\n"})]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{sha(x)}" for x in layers]},
        }
    ).encode()
    files = {f"{sha(config)}.json": config}
    for n, layer in enumerate(layers):
        files[f"{n:064x}/layer.tar"] = layer
        files[f"{n:064x}/VERSION"] = b"1.0"
    entry = {
        "Config": f"{sha(config)}.json",
        "RepoTags": tags,
        "Layers": [f"{n:064x}/layer.tar" for n in range(2)],
    }
    files["manifest.json"] = json.dumps([entry] * images).encode()
    path.write_bytes(tar_bytes(files))
    return config, layers


def convert(source: Path, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, SCRIPT, "oci-archive", source, target],
        env={**os.environ, "SOURCE_DATE_EPOCH": EPOCH},
        capture_output=True,
        text=True,
        timeout=60,
    )


def read(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_docker_archive_becomes_an_oci_layout_docker_still_loads(tmp_path: Path) -> None:
    config, layers = docker_archive(tmp_path / "docker.tar", ["fakeplugin.local/fakeplugin:0.2.0"])
    assert convert(tmp_path / "docker.tar", tmp_path / "oci.tar").returncode == 0
    files = read(tmp_path / "oci.tar")
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    # Every blob is named by its content's digest.
    blobs = {n: d for n, d in files.items() if n.startswith("blobs/sha256/")}
    assert all(n == f"blobs/sha256/{sha(d)}" for n, d in blobs.items())
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert entry["annotations"] == {
        "io.containerd.image.name": "fakeplugin.local/fakeplugin:0.2.0",
        "org.opencontainers.image.ref.name": "0.2.0",
    }
    manifest_bytes = blobs[f"blobs/sha256/{entry['digest'].removeprefix('sha256:')}"]
    assert entry["size"] == len(manifest_bytes)
    manifest = json.loads(manifest_bytes)
    assert manifest["config"] == {
        "mediaType": "application/vnd.oci.image.config.v1+json",
        "digest": f"sha256:{sha(config)}",
        "size": len(config),
    }
    # The layers in order, uncompressed: each digest is its diff_id in the config.
    assert [x["digest"] for x in manifest["layers"]] == json.loads(config)["rootfs"]["diff_ids"]
    assert [blobs[f"blobs/sha256/{sha(x)}"] for x in layers] == layers
    # docker's manifest.json, at the same blobs: what docker load reads.
    assert json.loads(files["manifest.json"]) == [
        {
            "Config": f"blobs/sha256/{sha(config)}",
            "RepoTags": ["fakeplugin.local/fakeplugin:0.2.0"],
            "Layers": [f"blobs/sha256/{sha(x)}" for x in layers],
        }
    ]
    # Reproducible: the same input twice gives the same bytes, dated SOURCE_DATE_EPOCH.
    assert convert(tmp_path / "docker.tar", tmp_path / "again.tar").returncode == 0
    assert (tmp_path / "again.tar").read_bytes() == (tmp_path / "oci.tar").read_bytes()
    with tarfile.open(tmp_path / "oci.tar") as tar:
        assert {m.mtime for m in tar.getmembers()} == {int(EPOCH)}


def test_short_names_get_containerds_full_name(tmp_path: Path) -> None:
    docker_archive(tmp_path / "docker.tar", ["fakeplugin:0.1.0"])
    assert convert(tmp_path / "docker.tar", tmp_path / "oci.tar").returncode == 0
    (entry,) = json.loads(read(tmp_path / "oci.tar")["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/fakeplugin:0.1.0"


def test_an_archive_that_already_is_an_oci_layout_is_copied(tmp_path: Path) -> None:
    docker_archive(tmp_path / "docker.tar", ["fakeplugin.local/fakeplugin:0.2.0"])
    assert convert(tmp_path / "docker.tar", tmp_path / "oci.tar").returncode == 0
    assert convert(tmp_path / "oci.tar", tmp_path / "copy.tar").returncode == 0
    assert (tmp_path / "copy.tar").read_bytes() == (tmp_path / "oci.tar").read_bytes()


def test_an_archive_of_two_images_or_none_tagged_fails_naming_it(tmp_path: Path) -> None:
    for name, tags, images in (("two.tar", ["a:1"], 2), ("untagged.tar", [], 1)):
        docker_archive(tmp_path / name, tags, images)
        done = convert(tmp_path / name, tmp_path / "out.tar")
        assert done.returncode != 0
        assert f"{tmp_path / name}: manifest.json is not one image with one tag" in done.stderr
