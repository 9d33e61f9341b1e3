"""The processes of a local cluster: started detached and recorded in cluster.json at once, waited for
with their logs at hand, stopped consumers first. Recognising and signalling: fakeplugin.cluster.processes.
"""

from __future__ import annotations

import logging
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fakeplugin.cluster.processes import ProcessRecord, is_running, rss_bytes, spawn, stop
from fakeplugin.cluster.state import ClusterError, StateStore

log = logging.getLogger("fakeplugin.cluster")

START_TIMEOUT = 120.0
POLL_SECONDS = 0.5
# Stop order: consumers before what they consume.
STOP_ORDER = (
    "plugin/",
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

    def launch(self, name: str, argvs: list[list[str]], env: dict[str, str] | None = None) -> ProcessRecord:
        """Start `name` (its log: logs/<name>.log) and record it, replacing an earlier record of the name."""
        state = self._store.require()
        log.info("starting %s", name)
        record, proc = spawn(name, argvs, self._store.layout.log(name), self._store.layout.root, env=env)
        self._popen[record.pid] = proc
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

    def stop(self, record: ProcessRecord) -> None:
        outcome = stop(record, self._popen.pop(record.pid, None))
        log.info("%s (pid %d): %s", record.name, record.pid, outcome)

    def stop_all(self) -> None:
        """Stop every recorded process, in STOP_ORDER; nothing when there is no state."""
        if self._store.state is None:
            return
        processes = self._store.state.processes
        rank = {
            p.name: next(i for i, prefix in enumerate(STOP_ORDER) if p.name.startswith(prefix))
            for p in processes
        }
        for record in sorted(processes, key=lambda p: rank[p.name]):
            self.stop(record)

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
        """Poll `ready`; fail early, with its log's tail, when a watched process (default: `what`) exits."""
        watched = watch if watch is not None else [self.record(what)]
        started = time.monotonic()
        while not ready():
            for record in watched:
                if not is_running(record):
                    raise ClusterError(
                        f"{record.name} exited while waiting for {what}; "
                        f"last lines of {record.log}:\n{tail(Path(record.log))}"
                    )
            if time.monotonic() - started > timeout:
                raise ClusterError(
                    f"timed out after {timeout:.0f} s waiting for {what}; logs in {self._store.layout.logs}"
                )
            time.sleep(POLL_SECONDS)
        log.info("waited %.1f s for %s", time.monotonic() - started, what)

    def wait_http(self, name: str, url: str) -> None:
        """Wait until `url` (a health endpoint of process `name`) answers 200."""
        self.wait(name, lambda: http_ok(url))


def http_ok(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2) as response:
            return response.status == 200
    except (OSError, urllib.error.URLError):
        return False


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
