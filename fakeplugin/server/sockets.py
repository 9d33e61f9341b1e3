"""Where the plugin's unix sockets live, and getting their paths ready for listening."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107


@dataclass(frozen=True)
class SocketPaths:
    registration: Path  # watched by the kubelet's plugin manager
    dra: Path  # PluginInfo.endpoint: the DRA (and device health) services


def socket_paths(driver_name: str, registrar_dir: Path, plugins_dir: Path, pod_uid: str = "") -> SocketPaths:
    """The upstream library's conventions; with a pod UID both names carry it, so an old and a new plugin pod
    can serve side by side during a rolling update."""
    _check_name_part("driver name", driver_name)
    if pod_uid:
        _check_name_part("pod UID", pod_uid)
    registration = f"{driver_name}-{pod_uid}-reg.sock" if pod_uid else f"{driver_name}-reg.sock"
    dra = f"dra-{pod_uid}.sock" if pod_uid else "dra.sock"
    return SocketPaths(
        registration=registrar_dir.absolute() / registration,
        dra=plugins_dir.absolute() / driver_name / dra,
    )


def _check_name_part(what: str, value: str) -> None:
    if not value or "/" in value or "\0" in value or value in (".", ".."):
        raise ValueError(f"{what} {value!r} cannot be used in a socket file name")


def check_length(path: Path) -> None:
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise ValueError(
            f"socket path {path} is {size} bytes long; unix sockets allow at most {MAX_SOCKET_PATH_BYTES}"
        )


def prepare_listen_path(path: Path) -> None:
    """Make `path` ready to listen on: length checked, parent created, a stale socket from an earlier run
    removed. Anything else at the path is left alone and reported."""
    check_length(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise FileExistsError(f"{path} exists and is not a socket; refusing to replace it")
    path.unlink()


def remove_socket(path: Path) -> None:
    """Remove the socket at `path` if there is one; the kubelet deregisters a plugin when it goes away."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
