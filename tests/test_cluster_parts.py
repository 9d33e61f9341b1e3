"""The local cluster's parts that need no cluster: binary lookup, nodes from an inventory, flags and
configs, and recognising our own processes (real processes, real signals)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fakeplugin.cluster import binaries, components, versions
from fakeplugin.cluster.computedomains import fabric_nodes
from fakeplugin.cluster.kubectl import DEFAULT_TIMEOUT, TIMEOUT_MARGIN, process_timeout
from fakeplugin.cluster.layout import StateLayout, too_long_sockets
from fakeplugin.cluster.processes import ProcessRecord, is_running, processes_of, spawn, stop
from fakeplugin.cluster.state import ClusterError, cluster_nodes
from fakeplugin.cluster.supervisor import STOP_ORDER
from fakeplugin.inventory import parse_inventory

REPO = Path(__file__).resolve().parents[1]


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        (("delete", "pods", "--all", "--wait=true", "--timeout=120s"), 120 + TIMEOUT_MARGIN),
        (("wait", "--for=condition=Ready", "--timeout=5m"), 300 + TIMEOUT_MARGIN),
        (("wait", "--timeout=1m30s"), 90 + TIMEOUT_MARGIN),
        (("get", "pods"), DEFAULT_TIMEOUT),
        (("wait", "--timeout=soon"), DEFAULT_TIMEOUT),  # not a Go duration: kubectl refuses it itself
    ],
)
def test_kubectl_runs_past_its_own_timeout_flag(args: tuple[str, ...], seconds: float) -> None:
    """Stop 37's CI failure: `delete --wait --timeout=120s` was killed after 60 s."""
    assert process_timeout(args) == seconds


def test_binary_lookup_follows_envtest_order(tmp_path: Path) -> None:
    cached = executable(tmp_path / "cache" / "k8s" / binaries.K8S_VERSION / "bin" / "kube-apiserver")
    assets = executable(tmp_path / "assets" / "kube-apiserver")
    single = executable(tmp_path / "single" / "my-apiserver")
    env = {"FAKEPLUGIN_CACHE": str(tmp_path / "cache")}
    assert binaries.find("kube-apiserver", env) == cached
    env["KUBEBUILDER_ASSETS"] = str(assets.parent)
    assert binaries.find("kube-apiserver", env) == assets
    env["TEST_ASSET_KUBE_APISERVER"] = str(single)
    assert binaries.find("kube-apiserver", env) == single
    # A set variable is taken as is, as in envtest: no fallback to the next place.
    env["TEST_ASSET_KUBE_APISERVER"] = str(tmp_path / "nowhere")
    with pytest.raises(
        binaries.BinaryNotFound, match=r"(?s)nowhere.*fakeplugin cluster build --only kube-apiserver`"
    ):
        binaries.find("kube-apiserver", env)


def test_a_release_wheels_own_helpers_come_after_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fakecri and kwok that a release's linux wheel carries (hack/release.sh): found only where the
    cache has none, never where TEST_ASSET_<NAME> or $KUBEBUILDER_ASSETS is set; etcd is never bundled."""
    bundled = tmp_path / "package" / "bin"
    monkeypatch.setattr(binaries, "BUNDLED_DIR", bundled)
    for name in ("fakecri", "kwok", "etcd"):
        executable(bundled / name)
    env = {"FAKEPLUGIN_CACHE": str(tmp_path / "cache")}
    cache = tmp_path / "cache" / "k8s" / binaries.K8S_VERSION / "bin"
    assert binaries.find("fakecri", env) == bundled / "fakecri"
    assert binaries.find("kwok", env) == bundled / "kwok"
    assert binaries.location("etcd", env) == cache / "etcd"
    with pytest.raises(binaries.BinaryNotFound) as missing:
        binaries.find_all(("etcd", "fakecri"), env)
    lines = str(missing.value).splitlines()
    assert "else the build cache, else for fakecri and kwok the package's own" in lines[0]
    assert lines[1:-1] == [f"  etcd: no executable at {cache / 'etcd'}"]
    # The cache first: what `cluster build` made for this version and this fakecri source.
    assert binaries.find("fakecri", env) == bundled / "fakecri"
    executable(cache / "fakecri")
    assert binaries.find("fakecri", env) == cache / "fakecri"
    # A set variable is taken as is, bundled helper or not.
    assert (
        binaries.location("kwok", {**env, "KUBEBUILDER_ASSETS": str(tmp_path / "a")})
        == tmp_path / "a" / "kwok"
    )
    assert binaries.location("kwok", {**env, "TEST_ASSET_KWOK": "/x/kwok"}) == Path("/x/kwok")
    # A helper that is not executable is not one.
    (bundled / "kwok").chmod(0o644)
    assert binaries.location("kwok", env) == cache / "kwok"


def test_find_all_names_every_missing_binary(tmp_path: Path) -> None:
    executable(tmp_path / "etcd")
    with pytest.raises(binaries.BinaryNotFound) as missing:
        binaries.find_all(("etcd", "kubelet", "fakecri"), {"KUBEBUILDER_ASSETS": str(tmp_path)})
    lines = str(missing.value).splitlines()
    assert [line.split(":")[0].strip() for line in lines[1:-1]] == ["kubelet", "fakecri"]
    assert "`fakeplugin cluster build --only kubelet,fakecri`" in lines[-1]


def test_feature_gates_override_the_dra_defaults() -> None:
    gates = components.parse_feature_gates("DRADeviceTaints=false, DRAConsumableCapacity=true")
    assert gates == {
        **components.DEFAULT_FEATURE_GATES,
        "DRADeviceTaints": False,
        "DRAConsumableCapacity": True,
    }
    assert components.gates_flag({"B": True, "A": False}) == "A=false,B=true"
    with pytest.raises(ValueError, match="'DRADeviceTaints': expected Name=true"):
        components.parse_feature_gates("DRADeviceTaints")


def test_cluster_nodes_from_the_seed_lab_plus_workers() -> None:
    inventory = parse_inventory({
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [
            {"name": "gpu-a", "labels": {"tier": "gpu"}, "gpus": [{"profile": "t10", "count": 2}]},
            {"name": "plain"},
            {"name": "gpu-b", "gpus": [{"profile": "t10"}]},
            {"selector": {"matchLabels": {"pool": "x"}}, "gpus": [{"profile": "t10"}]},
        ],
    })  # fmt: skip
    nodes = cluster_nodes(inventory, simulated_nodes=2)
    assert [(n.name, n.kubelet, n.gpus, n.index) for n in nodes] == [
        ("gpu-a", True, 2, 0),
        ("plain", False, 0, -1),
        ("gpu-b", True, 1, 1),
        ("worker-1", False, 0, -1),
        ("worker-2", False, 0, -1),
    ]
    # The inventory's labels and the GPU Operator's (tests/test_nodelabels.py), on GPU nodes only.
    assert (nodes[0].labels["tier"], nodes[0].labels["nvidia.com/gpu.count"]) == ("gpu", "2")
    assert (nodes[1].labels, nodes[3].labels) == ({}, {})
    clash = parse_inventory(
        {"driverVersion": "580.1", "cudaDriverVersion": "13.0", "nodes": [{"name": "worker-1"}]}
    )
    with pytest.raises(ClusterError, match="worker-1 clashes"):
        cluster_nodes(clash, simulated_nodes=1)


def test_fabric_nodes_get_the_gpu_clique_label_and_the_compute_domain_side() -> None:
    uuid = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
    inventory = parse_inventory({
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "gpuOperator": "none",  # no GPU Operator: the clique label is the inventory's alone
        "nodes": [
            {"name": "gb200-0", "gpus": [{"profile": "gb200"}], "fabric": {"clique": 3, "clusterUUID": uuid}},
            {"name": "t10", "gpus": [{"profile": "t10"}]},
        ],
    })  # fmt: skip
    nodes = cluster_nodes(inventory, simulated_nodes=0)
    assert nodes[0].labels == {"nvidia.com/gpu.clique": f"{uuid}.3"}
    assert nodes[1].labels == {}
    assert [n.name for n in fabric_nodes(inventory, nodes)] == ["gb200-0"]
    assert {"cd-plugin/", "cd-controller"} <= set(STOP_ORDER)  # stop_all ranks every process by it


def test_socket_paths_too_long_are_named() -> None:
    short = StateLayout(Path("/tmp/s")).node("capi-dralabs-md-gpua5000-jw4mx-d64jz", 0)
    deep = StateLayout(Path("/tmp/" + "d" * 65)).node("n", 0)
    assert too_long_sockets([short]) == []
    assert too_long_sockets([deep]) == [f"/tmp/{'d' * 65}/kubelet/0/plugins/gpu.nvidia.com/dra.sock"]


def test_everything_listens_on_loopback_only(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    ports = components.Ports(1, 2, 3, 4, 5)
    gates = components.DEFAULT_FEATURE_GATES
    bin_ = Path("/bin/x")
    argvs = [
        components.etcd_argv(bin_, layout, ports),
        components.apiserver_argv(bin_, layout, ports, gates, versions.release(versions.DEFAULT_VERSION)),
        components.scheduler_argv(bin_, layout, ports, gates),
        components.controller_manager_argv(bin_, layout, ports, gates),
        components.kwok_argv(bin_, layout),
    ]
    assert "--node-ip=127.0.0.1" in argvs[-1]
    urls_and_addresses = [a for argv in argvs for a in argv if "://" in a or "address=" in a]
    assert urls_and_addresses and all("127.0.0.1" in a for a in urls_and_addresses)
    config = components.kubelet_config(layout.node("n", 0), components.KubeletPorts(6, 7), gates)
    assert (config["address"], config["healthzBindAddress"], config["readOnlyPort"]) == (
        "127.0.0.1",
        "127.0.0.1",
        0,
    )
    assert config["featureGates"] == gates


def test_only_processes_with_our_command_line_are_signalled(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)]
    record, proc = spawn("sleeper", [argv], tmp_path / "logs" / "sleeper.log", tmp_path)
    try:
        assert is_running(record)
        assert processes_of(tmp_path) == [(record.pid, " ".join(argv))]
        impostor = ProcessRecord("sleeper", record.pid, ((*argv, "--other"),), record.log)
        assert stop(impostor, grace=1) == "not running"
        assert proc.poll() is None, "a pid whose command line differs must not be signalled"
        assert stop(record, proc, grace=10) == "stopped"
        assert proc.returncode is not None and not is_running(record)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cluster_command_help_lists_its_actions() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "cluster", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert all(action in out.stdout for action in ("up", "down", "status", "build"))


def test_the_fleet_gets_the_nvml_library_as_kubelet_nodes_and_plugin_args_can_turn_it_off() -> None:
    layout = StateLayout(Path("/tmp/s"))
    argv = components.fleet_argv("python3", Path("/i.yaml"), layout, [], Path("/c/libnvidia-ml.so.1"))
    assert argv[-2:] == ["--nodes-dir=/tmp/s/nodes", "--nvml-library=/c/libnvidia-ml.so.1"]
    off = components.fleet_argv("python3", Path("/i.yaml"), layout, ["--nvml-library="], Path("/c/l.so"))
    assert off[-2:] == ["--nvml-library=/c/l.so", "--nvml-library="]  # argparse: the last one wins
    assert "--nvml-library" not in " ".join(components.fleet_argv("python3", Path("/i.yaml"), layout, []))


def test_the_fleet_gets_the_plugin_flags_it_shares_and_no_gates_from_the_callers_env() -> None:
    plugin_args = [
        "--driver-release=0.5.0-dev",
        "--feature-gates=ConsumableShares=true",
        "--consumable-shares=memory",
        "--device-health",  # serve only
    ]
    argv = components.fleet_argv("python3", Path("/i.yaml"), StateLayout(Path("/tmp/s")), plugin_args)
    assert argv[-4:] == ["--nodes-dir=/tmp/s/nodes", *plugin_args[:3]]
    env = components.python_env({"FEATURE_GATES": "x", "CONSUMABLE_SHARES": "4", "HOME": "/h"}, Path("/src"))
    assert "FEATURE_GATES" not in env and "CONSUMABLE_SHARES" not in env and env["HOME"] == "/h"
