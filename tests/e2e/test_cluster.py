"""The local cluster itself: real control plane, real kubelets on a fake CRI, kwok-simulated workers, a host
left untouched, and a lifecycle that only ever touches its own processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakeplugin.cluster import Cluster, binaries, versions
from fakeplugin.cluster.processes import ProcessRecord, is_running, processes_of
from tests.harness.host import HostBefore, read_sysctls, require_cluster_host
from tests.harness.kube import apply, items, pod_phase, wait_for
from tests.harness.seedlab import A5000, GPU_NODE_LABELS, T10, WORKERS

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
# What the kubelet sets at start (container_manager_linux.go setupKernelTunables).
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


def test_kubectl_works_with_the_printed_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    out = subprocess.run(
        [str(binaries.find("kubectl")), f"--cache-dir={tmp_path}", "get", "nodes", "-o", "name"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert sorted(out.stdout.split()) == sorted(f"node/{n}" for n in [T10, A5000, *WORKERS])
    server = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    assert server.startswith("https://127.0.0.1:")


def test_nodes_are_ready_with_their_inventory_labels(cluster: Cluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in items(cluster, "nodes")}
    assert set(nodes) == {T10, A5000, *WORKERS}
    for name, node in nodes.items():
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", name
        assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"], name
        assert not node["spec"].get("taints"), name
    for gpu_node in (T10, A5000):
        node = nodes[gpu_node]
        assert GPU_NODE_LABELS.items() <= node["metadata"]["labels"].items()
        assert (
            node["status"]["nodeInfo"]["containerRuntimeVersion"] == "fakeRuntime://0.1.0"
        )  # a real kubelet
        assert node["status"]["nodeInfo"]["kubeletVersion"] == versions.selected()
    for worker, labels in WORKERS.items():
        node = nodes[worker]
        assert labels.items() <= node["metadata"]["labels"].items()
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"  # simulated by kwok
        assert node["status"]["nodeInfo"]["osImage"] == "simulated by kwok (fakeplugin fleet)"


def test_plain_pod_runs_on_a_kubelet_node_and_the_fake_cri_records_it(
    cluster: Cluster, namespace: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": T10},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "ctr", "image": "busybox:1.36", "env": [{"name": "GREETING", "value": "hi"}]}
            ],
        },
    }
    apply(cluster, namespace, pod)
    wait_for(lambda: pod_phase(cluster, namespace, "plain") == "Running", what="pod plain Running")

    record = cluster.container_record(namespace, "plain", "ctr")
    assert (record["podNamespace"], record["podName"], record["container"]) == (namespace, "plain", "ctr")
    assert record["cdiDevices"] == []
    assert "GREETING=hi" in record["env"]
    assert "error" not in record
    assert (cluster.node_dirs(T10).containers_dir / f"{namespace}_plain_ctr.json").is_file()
    assert not (cluster.node_dirs(A5000).containers_dir / f"{namespace}_plain_ctr.json").exists()


def test_kubelets_leave_the_hosts_kernel_settings_alone(cluster: Cluster, host_before: HostBefore) -> None:
    # The kubelets did set their values: into the stand-ins bound over /proc/sys in their namespace.
    for node in (T10, A5000):
        stand_ins = cluster.node_dirs(node).sysctl_dir
        assert {
            f: (stand_ins / f.replace("/", "_")).read_text().strip() for f in KUBELET_SYSCTLS
        } == KUBELET_SYSCTLS
    assert read_sysctls() == host_before.sysctls
    assert [p for p in host_before.absent_paths if p.exists()] == []


def test_lifecycle_second_up_refused_down_leaves_nothing_running(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Through the CLI, on a cluster of its own: one kubelet node without GPUs, one simulated node."""
    require_cluster_host()
    tmp_path = tmp_path_factory.mktemp("lc")  # short: the kubelet's socket paths must fit in 108 bytes
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [{"name": "solo", "kubelet": True}, {"name": "plain"}],
    }))  # fmt: skip
    state = tmp_path / "state"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "fakeplugin", "cluster", *args, f"--state-dir={state}"]
        return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)

    up = cli("up", f"--inventory={inventory}", "--no-plugin")
    assert up.returncode == 0, up.stderr
    try:
        assert up.stdout.strip() == f"export KUBECONFIG={state / 'admin.kubeconfig'}"
        records = [
            ProcessRecord.from_json(p) for p in json.loads((state / "cluster.json").read_text())["processes"]
        ]
        assert sorted(r.name for r in records) == sorted(
            [
                "etcd",
                "kube-apiserver",
                "kube-scheduler",
                "kube-controller-manager",
                "fakecri/solo",
                "kubelet/solo",
                "kwok",  # plays the node "plain"; no fleet without the plugin
            ]
        )
        assert all(is_running(r) for r in records)

        again = cli("up", f"--inventory={inventory}", "--no-plugin")
        assert again.returncode != 0
        assert "already running" in again.stderr
        assert all(is_running(r) for r in records), "a refused `up` must leave the running cluster alone"

        status = cli("status")
        assert status.returncode == 0, status.stderr
        assert "total RSS" in status.stdout and "solo" in status.stdout
    finally:
        down = cli("down")
    assert down.returncode == 0, down.stderr
    assert not any(is_running(r) for r in records)
    assert processes_of(state) == []
    assert not (state / "cluster.json").exists() and not (state / "etcd").exists()
    assert (state / "logs" / "kubelet_solo.log").stat().st_size > 0, "logs stay after down"
    assert cli("status").returncode == 1
