"""The processes of a local cluster: started detached and recorded in cluster.json at once, waited for
with their logs at hand, stopped consumers first. Recognising and signalling: fakeplugin.cluster.processes.

A process that exits while it is waited for fails the wait with why: its exit status or signal (known for
the processes this Supervisor started), the OOM killer's count when it was killed, and its log's last
lines, or that the log is empty or missing (naming it).
"""

from __future__ import annotations

import itertools
import logging
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from fakeplugin.cluster.processes import ProcessRecord, alive, is_running, rss_bytes, spawn, stop
from fakeplugin.cluster.state import ClusterError, StateStore, remove_runtime_state

log = logging.getLogger("fakeplugin.cluster")

START_TIMEOUT = 120.0
POLL_SECONDS = 0.5
VMSTAT = Path("/proc/vmstat")  # its oom_kill: the OOM killer's kills since boot, the whole machine's
# Stop order: consumers before what they consume.
STOP_ORDER = (
    "prometheus",
    "keda",
    "karpenter",
    "view",
    "kueue",
    "plugin/",
    "cd-plugin/",
    "cd-controller",
    "fleet",
    "kwok",
    "kubelet/",
    "fakecri/",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-apiserver",
    "etcd",
)

# Components serve self-signed certificates on loopback; proxies from the environment never apply.
_INSECURE = ssl.create_default_context()
_INSECURE.check_hostname = False
_INSECURE.verify_mode = ssl.CERT_NONE
_OPENER = urllib.request.build_opener(
    urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=_INSECURE)
)


@dataclass(frozen=True)
class ProcessStatus:
    name: str
    pid: int
    running: bool
    rss_bytes: int
    log: str


class Supervisor:
    """Starts, finds, waits for and stops the processes recorded in a cluster's state."""

    def __init__(self, store: StateStore) -> None:
        self._store = store
        self._popen: dict[int, subprocess.Popen[bytes]] = {}  # children of this process, reaped on stop
        self._oom_kills: dict[int, int | None] = {}  # pid -> oom_kills() when it was launched

    def launch(self, name: str, argvs: list[list[str]], env: dict[str, str] | None = None) -> ProcessRecord:
        """Start `name` (its log: logs/<name>.log) and record it, replacing an earlier record of the name."""
        state = self._store.require()
        log.info("starting %s", name)
        record, proc = spawn(name, argvs, self._store.layout.log(name), self._store.layout.root, env=env)
        self._popen[record.pid] = proc
        self._oom_kills[record.pid] = oom_kills()
        state.processes = [p for p in state.processes if p.name != name] + [record]
        self._store.save()
        return record

    def record(self, name: str) -> ProcessRecord:
        for p in self._store.require().processes:
            if p.name == name:
                return p
        raise ClusterError(f"no process {name} in {self._store.layout.cluster_file}")

    def records(self, *prefixes: str) -> list[ProcessRecord]:
        """The recorded processes whose names start with one of `prefixes`, e.g. "kubelet/"."""
        return [p for p in self._store.require().processes if p.name.startswith(prefixes)]

    def stop(self, record: ProcessRecord, *, crash: bool = False) -> None:
        """Stop a recorded process (`crash`: SIGKILL at once, see processes.stop)."""
        self._oom_kills.pop(record.pid, None)
        outcome = stop(record, self._popen.pop(record.pid, None), crash=crash)
        log.info("%s (pid %d): %s", record.name, record.pid, outcome)

    def stop_all(self) -> None:
        """Stop every recorded process, in STOP_ORDER, the processes of one rank at once (an interrupted
        run must be down in seconds); nothing when there is no state."""
        if self._store.state is None:
            return

        def rank(p: ProcessRecord) -> int:
            return next(i for i, prefix in enumerate(STOP_ORDER) if p.name.startswith(prefix))

        for _, group in itertools.groupby(sorted(self._store.state.processes, key=rank), key=rank):
            with ThreadPoolExecutor(thread_name_prefix="stop") as pool:
                list(pool.map(self.stop, group))

    def statuses(self) -> list[ProcessStatus]:
        return [
            ProcessStatus(p.name, p.pid, is_running(p), rss_bytes(p.pid) if is_running(p) else 0, p.log)
            for p in self._store.require().processes
        ]

    def wait(
        self,
        what: str,
        ready: Callable[[], bool],
        watch: list[ProcessRecord] | None = None,
        timeout: float = START_TIMEOUT,
    ) -> None:
        """Poll `ready`; fail early, saying why, when a watched process (default: `what`) exits."""
        watched = watch if watch is not None else [self.record(what)]
        started = time.monotonic()
        while not ready():
            for record in watched:
                if not alive(record, self._popen.get(record.pid)):
                    raise ClusterError(self._exit_report(record, what))
            if time.monotonic() - started > timeout:
                raise ClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}; logs in {self._store.layout.logs}"
                )
            time.sleep(POLL_SECONDS)
        log.info("waited %.1f s for %s", time.monotonic() - started, what)

    def _exit_report(self, record: ProcessRecord, what: str) -> str:
        proc = self._popen.get(record.pid)
        returncode = proc.returncode if proc is not None else None
        lines = [f"{record.name} exited while waiting for {what}: {exit_reason(returncode)}"]
        before, now = self._oom_kills.get(record.pid), oom_kills()
        if returncode == -signal.SIGKILL and before is not None and now is not None:
            change = f"rose by {now - before}" if now > before else "did not change"
            lines.append(f"the machine's OOM-kill count ({VMSTAT} oom_kill) {change} while it ran")
        lines.append(log_tail(Path(record.log)))
        return "\n".join(lines)

    def wait_http(self, name: str, url: str) -> None:
        """Wait until `url` (a health endpoint of process `name`) answers 200."""
        self.wait(name, lambda: http_ok(url))


def http_ok(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def exit_reason(returncode: int | None) -> str:
    """`exit status 3`, `killed by signal 9 (SIGKILL)`; None: a process another fakeplugin started."""
    if returncode is None:
        return "exit status unknown (not started by this process)"
    if returncode >= 0:
        return f"exit status {returncode}"
    try:
        name = f" ({signal.Signals(-returncode).name})"
    except ValueError:  # a real-time signal has no name
        name = ""
    return f"killed by signal {-returncode}{name}"


def oom_kills() -> int | None:
    """The OOM killer's kills since boot, memory cgroups' included (Linux 4.13+); None when unreadable."""
    try:
        for line in VMSTAT.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def log_tail(path: Path, lines: int = 20) -> str:
    """What a process printed, for an error: the log's last lines, or that it is empty or missing."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"its log {path} does not exist"
    if not text.strip():
        return f"its log {path} is empty: it printed nothing"
    return f"last lines of its log {path}:\n" + "\n".join(text.splitlines()[-lines:])


def take_down(store: StateStore, processes: Supervisor, purge: bool) -> None:
    """`cluster down` (Cluster.down, the watchdog): every recorded process stopped, then the runtime
    state removed; the logs too when `purge`."""
    with store.locked():
        if store.state is None:
            log.info("no cluster state in %s; nothing to stop", store.layout.root)
        processes.stop_all()
        remove_runtime_state(store.layout, purge)
        store.state = None
