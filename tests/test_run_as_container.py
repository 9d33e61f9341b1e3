"""A host command run as a local cluster's container (fakeplugin.cluster.crirecords.run_as_container,
`FakepluginCluster.run_as_container`): the container's env over the host's, its NVML reached through links
(LD_LIBRARY_PATH, FAKEPLUGIN_NVML_DESCRIPTION); and the local cluster's plugins getting the library built
into the cache once, or a warning and no NVML where no compiler builds it. The records here are made from
the real CDI spec Prepare writes, resolved as the fake CRI resolves it (its mounts' destination and source);
tests/e2e/test_nvml_in_pods.py does it on a cluster."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import nvml
from fakeplugin.cluster import components, crirecords, plugins
from fakeplugin.nvml.build import LIBRARY_NAME
from fakeplugin.testing import FakepluginCluster, FakepluginUnavailable
from tests.harness.nvml import PROBE
from tests.harness.prepare import BOOT, Node, gpu, ref, result

LIBRARY_DESTINATIONS = [f"/usr/lib/x86_64-linux-gnu/{LIBRARY_NAME}", f"/usr/lib64/{LIBRARY_NAME}"]


def record_of(spec_file: Path, devices: Sequence[str], env: Sequence[str] = ()) -> dict[str, Any]:
    """The fake CRI's record of a container given the CDI devices `devices` of the claim spec: the spec's
    edits, then each device's (CDI's order), env appended, mounts as OCI mounts."""
    spec = yaml.safe_load(spec_file.read_text())
    edits = [spec["containerEdits"]]
    edits += [d["containerEdits"] for d in spec["devices"] if d["name"].split("-", 5)[5] in devices]
    record: dict[str, Any] = {
        "podNamespace": "ns",
        "podName": "pod",
        "container": "ctr",
        "env": list(env),
        "mounts": [],
    }
    for edit in edits:
        record["env"] += edit.get("env", [])
        record["mounts"] += [
            {"destination": m["containerPath"], "source": m["hostPath"], "type": "bind"}
            for m in edit.get("mounts", [])
        ]
    return record


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def test_nvml_mounts_are_the_library_and_the_description_files() -> None:
    mounts = [
        {"destination": "/usr/bin/nvidia-smi", "source": "/p/bin/nvidia-smi"},
        *({"destination": d, "source": "/cache/lib.so"} for d in LIBRARY_DESTINATIONS),
        {"destination": "/run/fakeplugin/gpus/gpu-1.env", "source": "/p/smi/u-gpu-1.env"},
        {"destination": "/run/fakeplugin/nvml/gpu-1.nvml", "source": "/p/nvml/u-gpu-1.nvml"},
        {"destination": "/run/fakeplugin/nvml-not/gpu-2.nvml", "source": "/elsewhere"},
    ]
    assert crirecords.nvml_mounts(mounts) == crirecords.NvmlMounts(
        "/cache/lib.so", {"gpu-1.nvml": "/p/nvml/u-gpu-1.nvml"}
    )
    assert crirecords.nvml_mounts(mounts[:1]) == crirecords.NvmlMounts(None, {})


def test_the_env_is_the_containers_over_the_hosts_with_the_hosts_path_and_our_nvml() -> None:
    record = {"env": ["PATH=/usr/local/nvidia/bin", "A=container", "NVIDIA_VISIBLE_DEVICES=void", "X=a=b"]}
    host = {"PATH": "/usr/bin", "A": "host", "HOME": "/root", "LD_LIBRARY_PATH": "/opt/lib"}
    env = crirecords.container_env(record, host, Path("/t/lib"), Path("/t/nvml"))
    assert env == {
        "PATH": "/usr/bin",
        "A": "container",
        "HOME": "/root",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "X": "a=b",
        "LD_LIBRARY_PATH": "/t/lib:/opt/lib",
        nvml.DESCRIPTION_ENV: "/t/nvml",
    }
    # No library in the container: no NVML of ours, and none the host's environment pointed at.
    without = crirecords.container_env(record, {**host, nvml.DESCRIPTION_ENV: "/x"}, None, None)
    assert without["LD_LIBRARY_PATH"] == "/opt/lib" and nvml.DESCRIPTION_ENV not in without


def test_pynvml_run_as_each_container_lists_its_own_gpu(node: Node, nvml_library: Path) -> None:
    claim = node.add(ref(1), result("gpu-1", "a"), result("gpu-3", "b"))
    assert node.preparer(nvml_library=nvml_library).prepare([claim])[claim.uid].error == ""
    for device, minor in (("gpu-1", 1), ("gpu-3", 3)):
        record = record_of(node.spec_path(claim), [device], env=["MY_VAR=42"])
        done = crirecords.run_as_container(
            record, [sys.executable, "-c", f"import os, runpy; print(os.environ['MY_VAR']); {run_probe()}"]
        )
        assert done.returncode == 0, done.stderr
        first, probe_json = done.stdout.split("\n", 1)
        assert first == "42"
        seen = json.loads(probe_json)
        assert seen["count"] == 1, device
        assert [(g["uuid"], g["minor"]) for g in seen["gpus"]] == [(gpu(minor).uuid, minor)]


def run_probe() -> str:
    return f"runpy.run_path({str(PROBE)!r}, run_name='__main__')"


def test_a_container_without_the_library_gets_no_nvml_env(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    node.preparer().prepare([claim])
    record = record_of(node.spec_path(claim), ["gpu-1"])
    done = crirecords.run_as_container(
        record, [sys.executable, "-c", f"import os; print(os.environ.get({nvml.DESCRIPTION_ENV!r}))"]
    )
    assert done.stdout == "None\n"


def test_a_container_the_fake_cri_refused_is_not_run() -> None:
    record = {"podNamespace": "ns", "podName": "p", "container": "c", "error": "unresolvable CDI devices"}
    with pytest.raises(RuntimeError, match="container ns/p/c was not created: unresolvable CDI devices"):
        crirecords.run_as_container(record, ["true"])


def test_run_as_container_needs_a_local_cluster(tmp_path: Path) -> None:
    cluster = FakepluginCluster(tmp_path / "kubeconfig")
    with pytest.raises(FakepluginUnavailable, match="run_as_container: needs a local cluster"):
        cluster.run_as_container("ns", "pod", "ctr", "python3 -V")
    with pytest.raises(ValueError, match="empty command"):
        cluster.run_as_container("ns", "pod", "ctr", [])


# ---- the local cluster's plugins get the library ----------------------------------------------------------


@pytest.fixture
def fresh_build() -> Iterator[None]:
    plugins.nvml_library.cache_clear()
    yield
    plugins.nvml_library.cache_clear()


def test_the_plugins_get_the_library_of_the_cache(nvml_library: Path, fresh_build: None) -> None:
    cache = nvml_library.parents[2]  # <cache>/nvml/<hash>/libnvidia-ml.so.1, the session's build
    assert plugins.nvml_library(cache) == nvml_library  # found there, not compiled again
    assert plugins.nvml_library(cache) is plugins.nvml_library(cache)  # asked once per process
    assert components.nvml_args(nvml_library) == [f"--nvml-library={nvml_library}"]


def test_without_a_compiler_the_plugins_get_no_library_and_one_warning(
    tmp_path: Path, fresh_build: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    with caplog.at_level(logging.WARNING, logger="fakeplugin.cluster"):
        assert plugins.nvml_library(tmp_path) is None
        assert plugins.nvml_library(tmp_path) is None
    [warning] = caplog.records
    assert "containers get no NVML" in warning.getMessage()
    assert str(tmp_path / "no-cc") in warning.getMessage()
    assert components.nvml_args(None) == []
    assert not list(tmp_path.rglob(LIBRARY_NAME))


CTR = {"name": "ctr", "resources": {"claims": [{"name": "gpu"}]}}
RUNNING = {"spec": {"nodeName": "h100-0", "containers": [CTR]}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("pod", "container", "message"),
    [
        (None, "ctr", r"pod ns/p: not found in this cluster \(NotFound\)"),
        ({**RUNNING, "spec": {"nodeName": "elsewhere"}}, "ctr", "on node elsewhere, not a node"),
        ({**RUNNING, "spec": {"containers": []}}, "ctr", "not scheduled, not a node of this cluster"),
        ({**RUNNING, "status": {"phase": "Pending"}}, "ctr", "pod ns/p: Pending, not running"),
        (RUNNING, "other", "pod ns/p: no container other \\(it has ctr\\)"),
    ],
)
def test_run_as_container_names_what_is_missing(
    pod: dict[str, Any] | None, container: str, message: str
) -> None:
    with pytest.raises(LookupError, match=message):
        crirecords.check_runnable(pod, "ns/p", container, {"h100-0", "t10"}, "NotFound")


def test_a_running_pod_on_a_simulated_node_is_runnable() -> None:
    crirecords.check_runnable(RUNNING, "ns/p", "ctr", {"h100-0"})  # the fleet's record is read next
