"""An interrupted test run stops within seconds and leaves nothing behind: a pytest session on our plugin's
`fakeplugin_cluster`, interrupted by Ctrl-C, by SIGTERM (a CI job's timeout) while the cluster starts,
and by SIGKILL, leaves no process started for its state dir, no mount and no socket below it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.cluster.processes import processes_of
from tests.harness.host import require_cluster_host

pytestmark = pytest.mark.cluster

INVENTORY = """\
driverVersion: "580.126.20"
cudaDriverVersion: "13.0"
nodes:
- name: interrupted-t4
  gpus:
  - profile: t4
"""
SESSION = """
import time
from pathlib import Path


def test_runs_until_interrupted(fakeplugin_cluster, tmp_path_factory):
    Path({ready!r}).write_text("cluster up")
    time.sleep(600)
"""
SESSION_LOG = Path("session.log")  # the session's output, in its directory
# How long an interrupted run may take to be gone, cluster included: a few seconds on a quiet machine;
# the margin is for a loaded one (its log, with times, is in the failure).
DEADLINE = 90.0


@pytest.fixture
def state() -> Iterator[Path]:
    require_cluster_host()
    path = Path(tempfile.mkdtemp(prefix="fp-int-", dir="/tmp"))  # short: the kubelets' sockets live below
    yield path
    # Where the test failed, what was left would outlive the records removed below: killed here, each
    # provably started for this state dir (processes.processes_of: its environment's marker).
    for pid, _ in processes_of(path / "cluster"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


def start_session(state: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    ready = tmp_path / "ready"
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    (tmp_path / "test_session.py").write_text(textwrap.dedent(SESSION.format(ready=str(ready))))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s", "test_session.py",
         "--fakeplugin-inventory=inventory.yaml", "-o", "log_cli=true", "--log-cli-level=INFO",
         "--log-cli-format=%(asctime)s %(name)s %(message)s", f"--fakeplugin-state-dir={state / 'cluster'}"],
        cwd=tmp_path, stdout=(tmp_path / SESSION_LOG).open("w"), stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # a terminal's Ctrl-C: sent to this process alone, as below
        # As at a terminal, SIGINT raises KeyboardInterrupt, even where this run inherited it ignored
        # (a shell's background job, as hack/test.sh runs pytest): Python then leaves it ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    return proc, ready


def wait_until(what: str, done: object, proc: subprocess.Popen[str], log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if proc.poll() is not None:
            pytest.fail(f"the session ended before {what}:\n{log.read_text()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def left_behind(state: Path) -> list[str]:
    """What of the interrupted cluster still exists: processes, mounts, sockets."""
    found = [f"process {pid}: {cmd}" for pid, cmd in processes_of(state / "cluster")]
    prefix = str(state.resolve())
    found += [
        f"mount {line.split()[4]}"
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(prefix)
    ]
    for root, _, files in os.walk(state):
        found += [f"socket {root}/{f}" for f in files if stat.S_ISSOCK(os.lstat(f"{root}/{f}").st_mode)]
    return found


def gone_within_deadline(state: Path) -> list[str]:
    deadline = time.monotonic() + DEADLINE
    while (remaining := left_behind(state)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return remaining


@pytest.mark.parametrize(
    ("sig", "when"),
    [(signal.SIGINT, "running"), (signal.SIGTERM, "starting"), (signal.SIGKILL, "running")],
    ids=["ctrl-c-while-tests-run", "sigterm-while-the-cluster-starts", "sigkill-while-tests-run"],
)
def test_an_interrupted_run_leaves_nothing_behind(
    state: Path, tmp_path: Path, sig: signal.Signals, when: str
) -> None:
    proc, ready = start_session(state, tmp_path)
    try:
        if when == "running":
            wait_until("the cluster was up", ready.exists, proc, tmp_path / SESSION_LOG)
        else:
            wait_until(
                "the kube-apiserver started",
                lambda: "kube-apiserver" in str(processes_of(state / "cluster")),
                proc,
                tmp_path / SESSION_LOG,
            )
        assert processes_of(state / "cluster")
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=DEADLINE)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running {DEADLINE:.0f} s after {sig.name}:\n{(tmp_path / SESSION_LOG).read_text()}"
            )
        out = (tmp_path / SESSION_LOG).read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig != signal.SIGKILL:
        assert proc.returncode == 2, out  # pytest's "interrupted"
        assert "KeyboardInterrupt" in out
    assert gone_within_deadline(state) == []
    assert not (state / "cluster" / "kubeconfig").exists()
    if sig == signal.SIGKILL:  # the watchdog took it down, and said so in its log
        assert "is gone: taking it down" in (state / "cluster" / "logs" / "watchdog.log").read_text()
