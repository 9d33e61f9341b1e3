"""Atomic file replacement for files other processes read (CDI specs, the checkpoint)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix.

    Temp file in the same directory (hidden, `.tmp` suffix so CDI's `*.yaml`/`*.json` scan skips it),
    fsync, rename over the target, fsync the directory so the rename survives a crash.
    """
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), mode)  # exact mode, independent of the umask
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
