"""Atomic file replacement for files other processes read (CDI specs, the checkpoint), and cleaning up
the temp files a killed writer leaves behind.

Our temp files are named `.<target name>.fakeplugin-<16 hex digits>.tmp` in the target's directory: hidden,
with a `.tmp` suffix so CDI's `*.yaml`/`*.json` scan skips them, and recognisable as ours, so that
`remove_stale_temp_files` can remove them from directories we share (the CDI root holds other drivers'
files) without touching anything else.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from pathlib import Path

log = logging.getLogger(__name__)

TEMP_MARK = "fakeplugin"
_TEMP_NAME = re.compile(rf"^\.(?P<target>.+)\.{TEMP_MARK}-[0-9a-f]{{16}}\.tmp$", re.DOTALL)
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def temp_name(target_name: str) -> str:
    """A fresh temp file name for `target_name` (random part: 64 bits, so names practically never repeat)."""
    return f".{target_name}.{TEMP_MARK}-{secrets.token_hex(8)}.tmp"


def temp_target(name: str) -> str | None:
    """The target file name a temp file `name` of ours was written for, or None when it is not ours."""
    match = _TEMP_NAME.match(name)
    return match.group("target") if match else None


def write_atomic(path: Path, data: bytes, *, mode: int, sync: bool = True) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix, even when
    the writer is killed midway.

    Temp file in the same directory (`temp_name`), then rename over the target. A writer killed midway
    leaves at most its temp file (see `remove_stale_temp_files`); the target is always the old or the new
    content. `sync` fsyncs the file before the rename, as the kubelet's checkpoint store
    (pkg/kubelet/util/store) does, so the new content is on disk before any reader can see it. Files that
    live for one boot only (CDI specs, nvidia-smi data: a power loss is a reboot, after which every claim is
    prepared again) skip that.
    """
    while True:
        tmp_path = path.parent / temp_name(path.name)
        try:
            fd = os.open(tmp_path, _CREATE_FLAGS, 0o600)
            break
        except FileExistsError:  # 2^-64 per attempt; O_EXCL never reuses a file
            continue
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), mode)  # exact mode, independent of the umask
            tmp.write(data)
            tmp.flush()
            if sync:
                os.fsync(tmp.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def remove_stale_temp_files(directory: Path, *, target_prefix: str = "") -> list[Path]:
    """Remove the temp files of ours (`temp_name`) directly in `directory` whose target name starts with
    `target_prefix`; return what was removed. Only regular files are removed (a symlink, directory or
    anything else with a matching name stays, and no link is followed); a missing directory has none.

    Only safe while no writer of ours is using `directory` (callers hold the node lock at start).
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        target = temp_target(entry.name)
        if target is None or not target.startswith(target_prefix):
            continue
        try:
            if not stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
                continue
            os.unlink(entry.path)
        except FileNotFoundError:  # gone meanwhile: nothing left to remove
            continue
        removed.append(Path(entry.path))
        log.info("removed stale temp file %s (left by a writer that was killed)", entry.path)
    return removed
