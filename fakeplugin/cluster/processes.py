"""Detached processes we start, recognised later only by pid + exact command line.

Invariant: nothing is ever signalled unless /proc/<pid>/cmdline equals one of the command lines we
recorded when we started it (a reused pid, or a process of someone else, is left alone).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class ProcessRecord:
    name: str  # "etcd", "kube-apiserver", "kubelet/<node>", "fakecri/<node>", "plugin/<node>"
    pid: int
    argvs: tuple[tuple[str, ...], ...]  # every command line this pid may show (one per exec stage)
    log: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.pid, "argvs": [list(a) for a in self.argvs], "log": self.log}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        return cls(
            name=data["name"],
            pid=int(data["pid"]),
            argvs=tuple(tuple(a) for a in data["argvs"]),
            log=data["log"],
        )


def cmdline(pid: int) -> tuple[str, ...] | None:
    """The live command line of pid; None when gone or a zombie (whose cmdline reads empty)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return tuple(raw.decode(errors="replace").split("\0")[:-1]) or None


def is_running(record: ProcessRecord) -> bool:
    """True when record.pid is alive and still runs one of the command lines we started."""
    return cmdline(record.pid) in record.argvs


def spawn(
    name: str, argvs: list[list[str]], log: Path, cwd: Path, env: dict[str, str] | None = None
) -> tuple[ProcessRecord, subprocess.Popen[bytes]]:
    """Start argvs[0] in its own session (no terminal signals), output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argvs[0],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    return ProcessRecord(name=name, pid=proc.pid, argvs=tuple(tuple(a) for a in argvs), log=str(log)), proc


def stop(
    record: ProcessRecord, proc: subprocess.Popen[bytes] | None = None, grace: float = GRACE_SECONDS
) -> str:
    """SIGTERM, then SIGKILL after `grace` seconds; returns what happened, for progress output.

    `proc` is our Popen when this process started it: waited on, so no zombie is left behind.
    """
    if not is_running(record):
        _reap(proc)
        return "not running"
    _signal(record, signal.SIGTERM)
    if _wait_gone(record, proc, grace):
        return "stopped"
    _signal(record, signal.SIGKILL)
    if _wait_gone(record, proc, grace):
        return f"killed after {grace:.0f} s"
    raise RuntimeError(f"{record.name} (pid {record.pid}) survived SIGKILL")


def processes_in(cwd: Path) -> list[tuple[int, str]]:
    """Live processes whose working directory is `cwd` (pid, command line): every process a
    cluster starts runs in its state dir, so this finds them even without their records."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            same = Path(os.readlink(entry / "cwd")) == cwd
        except OSError:  # gone, or a kernel thread
            continue
        argv = cmdline(int(entry.name))
        if same and argv:
            found.append((int(entry.name), " ".join(argv)))
    return found


def rss_bytes(pid: int) -> int:
    """Resident set size of pid (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def _signal(record: ProcessRecord, sig: signal.Signals) -> None:
    if is_running(record):  # checked again right before each signal
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)


def _wait_gone(record: ProcessRecord, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(proc)
        if not is_running(record):
            return True
        time.sleep(0.1)
    return False


def _reap(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        proc.poll()
