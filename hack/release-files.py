#!/usr/bin/env python3
"""hack/release.sh's file work, reproducible: the same inputs and SOURCE_DATE_EPOCH give the same bytes.
Standard library only (it runs on the release tools' python, without fakeplugin's dependencies).

  release-files.py tgz IN OUT
      rewrite a .tar.gz (setuptools' sdist, helm's package) deterministically: entries sorted by name,
      mtime SOURCE_DATE_EPOCH, owner 0:0 without names, mode 0644 (0755 for directories and files with an
      execute bit), no PAX headers of the builder's; gzip header without a name and with mtime 0
  release-files.py wheel IN OUT_DIR [--platform TAGS --helpers DIR]
      rewrite a wheel deterministically (entries sorted, .dist-info last and RECORD at the very end, dated
      SOURCE_DATE_EPOCH, mode 0644 or 0755); with --platform, a platform wheel: the executables of DIR
      added as fakeplugin/cluster/bin/<name> (0755), WHEEL saying Root-Is-Purelib: false and one Tag line
      per platform tag of TAGS (dot-separated, as in the file name), RECORD rewritten; prints its path
  release-files.py chart-values VALUES REPOSITORY TAG
      set the top-level image.repository and image.tag of a chart's values.yaml, in place, keeping the rest
      of the file as it is
  release-files.py oci-archive IN OUT
      the image archive of `docker save` (one image, one tag) as an OCI image layout that `docker load`
      still reads, as Docker 25 and later write it: blobs/sha256/<digest> for the config and the layers,
      the OCI manifest, index.json (the image's name in its annotations), oci-layout, and docker's
      manifest.json pointing at the same blobs. An archive that already is one (Docker >= 25) is copied.
      Older engines (Debian's docker.io 20.10) write only docker's format: it is converted, entries sorted
      and dated SOURCE_DATE_EPOCH
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from typing import IO, Any

HELPERS_IN_WHEEL = "fakeplugin/cluster/bin"  # fakeplugin/cluster/binaries.py's BUNDLED_DIR
ZIP_EPOCH = 315532800  # 1980-01-01, the earliest date a zip entry can hold


def source_date_epoch() -> int:
    value = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not value.isdigit():
        sys.exit("release-files: SOURCE_DATE_EPOCH is not set to a number of seconds (the commit's time)")
    return int(value)


def mode_of(executable: bool) -> int:
    return 0o755 if executable else 0o644


# ---- tar.gz ----------------------------------------------------------------------------------------------


def normalise_tgz(source: Path, target: Path) -> None:
    epoch = source_date_epoch()
    with tarfile.open(source, "r:gz") as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as out:
        for member, data in sorted(members, key=lambda pair: pair[0].name):
            if not (member.isfile() or member.isdir() or member.issym()):
                sys.exit(f"release-files: {source}: {member.name} is neither a file, a folder nor a link")
            info = tarfile.TarInfo(member.name)
            info.type, info.linkname = member.type, member.linkname
            info.mode = mode_of(member.isdir() or bool(member.mode & 0o111))
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            if data is not None:
                info.size = len(data)
            out.addfile(info, io.BytesIO(data) if data is not None else None)
    with target.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        gz.write(buffer.getvalue())


# ---- wheels ----------------------------------------------------------------------------------------------


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_order(name: str, dist_info: str) -> tuple[int, str]:
    if name == f"{dist_info}/RECORD":
        return (2, name)
    return (1 if name.startswith(f"{dist_info}/") else 0, name)


def write_wheel(source: Path, out_dir: Path, platform: str | None, helpers: Path | None) -> Path:
    epoch = max(source_date_epoch(), ZIP_EPOCH)
    date_time = time.gmtime(epoch)[:6]
    with zipfile.ZipFile(source) as wheel:
        files = {
            i.filename: (wheel.read(i), bool((i.external_attr >> 16) & 0o111))
            for i in wheel.infolist()
            if not i.is_dir()
        }
    (dist_info,) = {n.split("/", 1)[0] for n in files if n.split("/", 1)[0].endswith(".dist-info")}
    distribution, version = dist_info.removesuffix(".dist-info").split("-")
    tags = ["py3-none-any"]
    if platform:
        if helpers is None:
            sys.exit("release-files: --platform needs --helpers")
        tags = [f"py3-none-{tag}" for tag in platform.split(".")]
        for helper in sorted(helpers.iterdir()):
            if not (helper.is_file() and os.access(helper, os.X_OK)):
                sys.exit(f"release-files: {helper} is not an executable file")
            name = f"{HELPERS_IN_WHEEL}/{helper.name}"
            if name in files:
                sys.exit(f"release-files: {source} already holds {name}")
            files[name] = (helper.read_bytes(), True)
        lines = files[f"{dist_info}/WHEEL"][0].decode().splitlines()
        kept = [line for line in lines if line and not line.startswith(("Root-Is-Purelib:", "Tag:"))]
        wheel_file = [*kept, "Root-Is-Purelib: false", *(f"Tag: {tag}" for tag in tags)]
        files[f"{dist_info}/WHEEL"] = (("\n".join(wheel_file) + "\n").encode(), False)
    record = f"{dist_info}/RECORD"
    files.pop(record, None)
    lines = [f"{n},{record_hash(data)},{len(data)}" for n, (data, _) in sorted(files.items())]
    files[record] = (("\n".join([*lines, f"{record},,"]) + "\n").encode(), False)
    target = out_dir / f"{distribution}-{version}-py3-none-{platform or 'any'}.whl"
    with zipfile.ZipFile(target, "w") as out:
        for name in sorted(files, key=lambda n: wheel_order(n, dist_info)):
            data, executable = files[name]
            info = zipfile.ZipInfo(name, date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix: the mode below is read
            info.external_attr = (0o100000 | mode_of(executable)) << 16
            out.writestr(info, data, compresslevel=9)
    return target


# ---- the chart's values ----------------------------------------------------------------------------------


def set_chart_image(values: Path, repository: str, tag: str) -> None:
    """image.repository and image.tag, the lines of the top-level `image:` block (two-space indent)."""
    text = values.read_text()
    block = re.search(r"(?m)^image:\n((?:  .*\n|\s*\n)+)", text)
    if block is None:
        sys.exit(f"release-files: {values} has no top-level `image:` block")
    body = block.group(1)
    body, repos = re.subn(r"(?m)^  repository: .*$", f"  repository: {repository}", body)
    body, tags = re.subn(
        r"(?m)^(?:  #.*\n)*  tag: .*$", f'  # This release\'s image (hack/release.sh).\n  tag: "{tag}"', body
    )
    if (repos, tags) != (1, 1):
        sys.exit(f"release-files: {values}: `image:` has no single repository and tag line")
    values.write_text(text[: block.start(1)] + body + text[block.end(1) :])


# ---- the image archive -------------------------------------------------------------------------------------

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def full_name(reference: str) -> str:
    """A reference as containerd names it: docker.io/library/ added where docker leaves it out."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def _digest(stream: IO[bytes]) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def oci_archive(source: Path, target: Path) -> None:
    with tarfile.open(source) as tar:
        names = set(tar.getnames())
        if {"oci-layout", "index.json", "manifest.json"} <= names:
            shutil.copyfile(source, target)
            return
        try:
            (entry,) = json.load(tar.extractfile("manifest.json"))
            (tag,) = entry["RepoTags"]
            config_path, layer_paths = entry["Config"], list(entry["Layers"])
        except (KeyError, ValueError, TypeError) as e:
            sys.exit(f"release-files: {source}: manifest.json is not one image with one tag ({e!r})")
        blobs: dict[str, tuple[str, int]] = {}  # digest -> (member of `source`, size)
        digests = []
        for path in [config_path, *layer_paths]:
            digest, size = _digest(tar.extractfile(path))
            blobs[digest] = (path, size)
            digests.append(digest)
        config, *layers = digests

        def descriptor(media_type: str, digest: str) -> dict[str, Any]:
            return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": blobs[digest][1]}

        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": descriptor("application/vnd.oci.image.config.v1+json", config),
                "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", d) for d in layers],
            },
            separators=(",", ":"),
        ).encode()
        manifest_digest = hashlib.sha256(manifest).hexdigest()
        annotations = {
            "io.containerd.image.name": full_name(tag),
            "org.opencontainers.image.ref.name": tag.rpartition(":")[2],
        }
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": f"sha256:{manifest_digest}",
                    "size": len(manifest),
                    "annotations": annotations,
                }
            ],
        }
        docker = [
            {
                "Config": f"blobs/sha256/{config}",
                "RepoTags": [tag],
                "Layers": [f"blobs/sha256/{d}" for d in layers],
            }
        ]
        small = {
            "index.json": json.dumps(index).encode(),
            "manifest.json": json.dumps(docker).encode(),
            "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
            f"blobs/sha256/{manifest_digest}": manifest,
        }
        epoch = source_date_epoch()
        with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as out:
            entries = sorted([*small, *(f"blobs/sha256/{d}" for d in blobs), "blobs", "blobs/sha256"])
            for name in entries:
                info = tarfile.TarInfo(name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
                if name in ("blobs", "blobs/sha256"):
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    out.addfile(info)
                    continue
                info.mode = 0o644
                if name in small:
                    info.size = len(small[name])
                    out.addfile(info, io.BytesIO(small[name]))
                    continue
                member, info.size = blobs[name.removeprefix("blobs/sha256/")]
                out.addfile(info, tar.extractfile(member))


def main() -> None:
    parser = argparse.ArgumentParser(prog="release-files.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tgz = sub.add_parser("tgz")
    tgz.add_argument("source", type=Path)
    tgz.add_argument("target", type=Path)
    wheel = sub.add_parser("wheel")
    wheel.add_argument("source", type=Path)
    wheel.add_argument("out_dir", type=Path)
    wheel.add_argument("--platform")
    wheel.add_argument("--helpers", type=Path)
    values = sub.add_parser("chart-values")
    values.add_argument("values", type=Path)
    values.add_argument("repository")
    values.add_argument("tag")
    archive = sub.add_parser("oci-archive")
    archive.add_argument("source", type=Path)
    archive.add_argument("target", type=Path)
    args = parser.parse_args()
    if args.command == "tgz":
        normalise_tgz(args.source, args.target)
    elif args.command == "wheel":
        print(write_wheel(args.source, args.out_dir, args.platform, args.helpers))
    elif args.command == "oci-archive":
        oci_archive(args.source, args.target)
    else:
        set_chart_image(args.values, args.repository, args.tag)


if __name__ == "__main__":
    main()
