"""bench/common.py, the benchmarks' shared helpers, on real inputs: this process's /proc files, a child
process, real files, fakeplugin's own parsers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import common
from fakeplugin.cli import build_parser
from fakeplugin.inventory import load_inventory


def test_percentile_is_the_nearest_rank() -> None:
    values = [50.0, 10.0, 40.0, 20.0, 30.0]  # unordered
    assert [common.percentile(values, p) for p in (0, 25, 50, 99, 100)] == [10.0, 20.0, 30.0, 50.0, 50.0]
    hundred = [float(v) for v in range(1, 101)]
    assert (common.percentile(hundred, 50), common.percentile(hundred, 99)) == (51.0, 99.0)
    assert common.percentile([7.0], 99) == 7.0


def test_median_max_rounds_both() -> None:
    assert common.median_max([3.0, 1.0, 2.46]) == {"median": 2.46, "max": 3.0}
    assert common.median_max([1.04, 2.0, 9.96, 4.0], 1) == {"median": 3.0, "max": 10.0}


def test_rss_follows_what_this_process_touches() -> None:
    rss, peak = common.rss_kib(os.getpid())
    assert 0 < rss <= peak
    block = bytearray(64 * 2**20)  # zero-filled: every page touched
    rss_with, peak_with = common.rss_kib(os.getpid())
    assert rss_with - rss >= 60 * 1024 and peak_with >= 60 * 1024
    assert block[-1] == 0


def test_cpu_seconds_is_this_process_s_user_and_system_time() -> None:
    before = common.cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.3
    while time.process_time() < deadline:
        pass
    spent = common.cpu_seconds(os.getpid()) - before
    assert 0.25 <= spent <= 1.0
    assert abs(common.cpu_seconds(os.getpid()) - time.process_time()) < 0.1


def test_start_epoch_of_a_child_is_when_it_started() -> None:
    started = time.time()
    child = subprocess.Popen(["sleep", "5"])
    try:
        assert abs(common.start_epoch(child.pid) - started) < 1.5  # btime has a resolution of 1 s
    finally:
        child.kill()
        child.wait()


def test_cpu_by_process_reads_the_running_processes_of_a_cluster() -> None:
    cluster = SimpleNamespace(
        status=lambda: [
            SimpleNamespace(name="me", pid=os.getpid(), running=True),
            SimpleNamespace(name="stopped", pid=1, running=False),
        ]
    )
    cpu = common.cpu_by_process(cluster)  # type: ignore[arg-type]
    assert list(cpu) == ["me"] and cpu["me"] > 0


def test_wait_until_returns_the_wait_and_names_what_timed_out() -> None:
    answers = iter([False, False, True])
    assert 0.9 <= common.wait_until("the third answer", lambda: next(answers), 10) < 3
    with pytest.raises(SystemExit, match=r"^timed out after 0 s waiting for nothing$"):
        common.wait_until("nothing", lambda: False, 0.1)


def test_report_prints_the_results_and_writes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {"nodes": 3, "waves": [{"seconds": 1.5}]}
    common.report(results, tmp_path / "out.json")
    assert json.loads(capsys.readouterr().out) == results
    assert json.loads((tmp_path / "out.json").read_text()) == results
    common.report(results, None)
    assert json.loads(capsys.readouterr().out) == results


def test_say_is_timestamped_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    common.say("cluster up")
    out, err = capsys.readouterr()
    assert out == "" and re.fullmatch(r"\[bench \d\d:\d\d:\d\d\] cluster up\n", err)


def test_machine_names_cores_memory_and_python() -> None:
    text = common.machine()
    assert text.startswith(f"{os.cpu_count()} cores (") and re.search(r"\), \d+ GiB, Python 3\.\d+", text)


def test_inventories_are_valid_and_a_cluster_s_sits_beside_its_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    nodes = [{"namePrefix": "h200-", "replicas": 3, "kubelet": False, "gpus": [{"profile": "h200"}]}]
    path = common.inventory_beside(state, nodes)
    assert path == tmp_path / "state-inventory.yaml" and state.is_dir() and not list(state.iterdir())
    inv = load_inventory(str(path))
    assert [name for entry in inv.nodes for name in entry.node_names()] == ["h200-0", "h200-1", "h200-2"]
    one = common.write_inventory(tmp_path / "new" / "inv.yaml", [{"name": "n1", "gpus": [{"profile": "t4"}]}])
    assert load_inventory(str(one)).nodes[0].gpu_count == 1


def test_serve_argv_is_a_command_line_fakeplugin_serve_takes(tmp_path: Path) -> None:
    argv = common.serve_argv(tmp_path / "inv.yaml", "bench-node", "/k/config", tmp_path / "root")
    assert argv[1:4] == ["-m", "fakeplugin", "serve"]
    args = build_parser().parse_args(argv[3:])
    assert (args.inventory, args.node_name, args.kubeconfig) == (
        str(tmp_path / "inv.yaml"),
        "bench-node",
        "/k/config",
    )
    assert args.kubelet_plugins_directory_path == str(tmp_path / "root" / "plugins")
    assert args.kubelet_registrar_directory_path == str(tmp_path / "root" / "reg")
    assert args.cdi_root == str(tmp_path / "root" / "cdi")


def test_cluster_arguments() -> None:
    parser = common.cluster_arguments("doc", "/tmp/bench-x")
    args = parser.parse_args([])
    assert (args.state_dir, args.json, args.keep) == (Path("/tmp/bench-x"), None, False)
    args = parser.parse_args(["--state-dir", "/s", "--json", "o.json", "--keep"])
    assert (args.state_dir, args.json, args.keep) == (Path("/s"), Path("o.json"), True)


def pod(uid: str, phase: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "status": {"phase": phase}}


class OneWatch:
    """A list, then one watch's events, then the watch's end stops the PodWatch."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.paths: list[str] = []

    def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        self.paths.append(path)
        return [pod("a", "Pending"), pod("b", "Running")], "7"

    def watch(self, path: str, *, resource_version: str, timeout_seconds: int) -> Iterator[dict[str, Any]]:
        assert (path, resource_version) == (self.paths[-1], "7")
        yield {"type": "MODIFIED", "object": pod("a", "Running")}
        yield {"type": "ADDED", "object": pod("c", "Running")}
        yield {"type": "DELETED", "object": pod("b", "Running")}
        yield {"type": "BOOKMARK", "object": pod("d", "Running")}
        self.stop.set()


def test_pod_watch_counts_running_pods_from_one_list_and_its_watch() -> None:
    watch = common.PodWatch(None, "team-a")  # type: ignore[arg-type]
    watch.kube = kube = OneWatch(watch.stop)
    watch.run()
    assert kube.paths == ["/api/v1/namespaces/team-a/pods"]
    assert watch.phase == {"a": "Running", "c": "Running"} and watch.running() == 2
