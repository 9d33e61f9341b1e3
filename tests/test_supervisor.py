"""The local cluster's supervisor with real short-lived processes: why a component that exits at once
exited (status or signal, what it printed, the OOM killer), and a child mid-exec is not taken for gone."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.cluster import supervisor
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.state import ClusterError, State, StateStore
from fakeplugin.cluster.supervisor import Supervisor

OOM_UNCHANGED = "the machine's OOM-kill count (/proc/vmstat oom_kill) did not change while it ran"
OOM_ROSE = re.compile(r"the machine's OOM-kill count \(/proc/vmstat oom_kill\) rose by \d+ while it ran")


@pytest.fixture
def processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Supervisor]:
    monkeypatch.setattr(supervisor, "POLL_SECONDS", 0.01)
    store = StateStore(StateLayout(tmp_path))
    store.state = State(inventory="", server="", feature_gates={}, plugin=False, ports={}, nodes=[])
    running = Supervisor(store)
    yield running
    running.stop_all()


def failure(processes: Supervisor, name: str, script: str) -> str:
    processes.launch(name, [["sh", "-c", script]])
    with pytest.raises(ClusterError) as failed:
        processes.wait(name, lambda: False, timeout=60)
    return str(failed.value)


def test_an_exit_names_its_status_and_what_it_printed(processes: Supervisor, tmp_path: Path) -> None:
    message = failure(processes, "kubelet/n1", "echo starting; echo boom >&2; exit 3")
    assert message == (
        "kubelet/n1 exited while waiting for kubelet/n1: exit status 3\n"
        f"last lines of its log {tmp_path}/logs/kubelet_n1.log:\nstarting\nboom"
    )


def test_an_exit_without_output_says_the_log_is_empty(processes: Supervisor, tmp_path: Path) -> None:
    message = failure(processes, "fakecri/n1", "exit 0")
    assert message == (
        "fakecri/n1 exited while waiting for fakecri/n1: exit status 0\n"
        f"its log {tmp_path}/logs/fakecri_n1.log is empty: it printed nothing"
    )


def test_a_kill_names_the_signal_and_the_oom_killers_count(processes: Supervisor, tmp_path: Path) -> None:
    status, oom, log = failure(processes, "etcd", "kill -KILL $$").split("\n")
    assert status == "etcd exited while waiting for etcd: killed by signal 9 (SIGKILL)"
    assert oom == OOM_UNCHANGED or OOM_ROSE.fullmatch(oom), oom  # the count is the whole machine's
    assert log == f"its log {tmp_path}/logs/etcd.log is empty: it printed nothing"


def test_a_child_whose_command_line_reads_otherwise_mid_exec_has_not_exited(processes: Supervisor) -> None:
    # After `exec`, the pid runs a command line its record does not list: what a kubelet's pid shows for
    # a moment in each of its exec stages (unshare, sh, kubelet), where /proc/<pid>/cmdline reads empty.
    record = processes.launch("kubelet/n1", [["sh", "-c", "exec sleep 30"]])
    polls = iter(range(20))
    processes.wait("kubelet/n1", lambda: next(polls) == 19)  # 20 polls while it runs: no error
    processes.stop(record)  # and it is stopped, not left running as "not running"
    with pytest.raises(ProcessLookupError):
        os.kill(record.pid, 0)
