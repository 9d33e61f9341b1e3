"""Detached processes we start, recognised later only by pid + exact command line.

Invariant: nothing is ever signalled unless /proc/<pid>/cmdline equals one of the command lines we
recorded when we started it (a reused pid, or a process of someone else, is left alone), or it is a
child of this process not yet reaped (its Popen), whose pid cannot have been reused. An environment
marker additionally finds whatever was started for a state dir, records or not, so that a state dir is
never removed under a running process (processes_of).

While a pid execs its next stage (the kubelet's: unshare, sh, kubelet) its cmdline reads empty for a
moment (a tight poll of `exec` chains saw it in 17 of 200): for our own children the Popen, not the
command line, says whether they still run (`alive`).
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
MARKER = "FAKEPLUGIN_CLUSTER_STATE_DIR"


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


def alive(record: ProcessRecord, proc: subprocess.Popen[bytes] | None) -> bool:
    """Whether the process still runs: our child `proc` until it has exited (reaped here, its status kept
    in proc.returncode), else `is_running`."""
    return proc.poll() is None if proc is not None else is_running(record)


def spawn(
    name: str, argvs: list[list[str]], log: Path, state_dir: Path, env: dict[str, str] | None = None
) -> tuple[ProcessRecord, subprocess.Popen[bytes]]:
    """Start argvs[0] in `state_dir`, in its own session (no terminal signals), output appended to
    `log`, marked in its environment as started for `state_dir` (see processes_of)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argvs[0],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env={**(os.environ if env is None else env), MARKER: str(state_dir)},
            start_new_session=True,
        )
    # Right after exec, /proc/<pid>/cmdline can still read empty for a moment; a record must not look
    # "not running" then (callers watch records to fail fast), so return once the kernel shows it.
    deadline = time.monotonic() + 5
    while cmdline(proc.pid) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return ProcessRecord(name=name, pid=proc.pid, argvs=tuple(tuple(a) for a in argvs), log=str(log)), proc


def stop(
    record: ProcessRecord,
    proc: subprocess.Popen[bytes] | None = None,
    grace: float = GRACE_SECONDS,
    *,
    crash: bool = False,
) -> str:
    """SIGTERM, then SIGKILL after `grace` seconds (`crash`: SIGKILL at once, a `kill -9`); returns what
    happened, for progress output.

    `proc` is our Popen when this process started it: waited on, so no zombie is left behind.
    """
    if not alive(record, proc):
        _reap(proc)
        return "not running"
    if not crash:
        _signal(record, proc, signal.SIGTERM)
        if _wait_gone(record, proc, grace):
            return "stopped"
    _signal(record, proc, signal.SIGKILL)
    if _wait_gone(record, proc, grace):
        return "killed" if crash else f"killed after {grace:.0f} s"
    raise RuntimeError(f"{record.name} (pid {record.pid}) survived SIGKILL")


def processes_of(state_dir: Path) -> list[tuple[int, str]]:
    """Live processes carrying the marker spawn() gives everything it starts for `state_dir` (their
    children inherit it): found even without their records. (pid, command line) pairs."""
    marker = f"{MARKER}={state_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        argv = cmdline(int(entry.name))
        if marker in environ and argv:
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


def _signal(record: ProcessRecord, proc: subprocess.Popen[bytes] | None, sig: signal.Signals) -> None:
    if alive(record, proc):  # checked again right before each signal
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, sig)


def _wait_gone(record: ProcessRecord, proc: subprocess.Popen[bytes] | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(record, proc):  # gone, or a zombie of ours: reap it
            _reap(proc)
            return True
        time.sleep(0.1)
    return False


def _reap(proc: subprocess.Popen[bytes] | None) -> None:
    """Wait for our child once its command line is gone (it is exiting or a zombie)."""
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=GRACE_SECONDS)
