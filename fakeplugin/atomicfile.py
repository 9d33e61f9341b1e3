"""Atomic file replacement for files other processes read (CDI specs, the checkpoint)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int, sync: bool = True) -> None:
    """Replace `path` with `data` so that readers see the old or the new content, never a mix, even when
    the writer is killed midway.

    Temp file in the same directory (hidden, `.tmp` suffix so CDI's `*.yaml`/`*.json` scan skips it), then
    rename over the target. `sync` fsyncs the file before the rename, as the kubelet's checkpoint store
    (pkg/kubelet/util/store) does, so the new content is on disk before any reader can see it. Files that
    live for one boot only (CDI specs, nvidia-smi data: a power loss is a reboot, after which every claim is
    prepared again) skip that.
    """
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), mode)  # exact mode, independent of the umask
            tmp.write(data)
            tmp.flush()
            if sync:
                os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
