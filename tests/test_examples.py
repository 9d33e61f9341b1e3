"""examples/gb200-nvl72.yaml as a fixture: every command its header names runs, and what it renders is two
racks of their own clique plus one kubelet node without one."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.apis.computedomain import GPU_CLIQUE_LABEL
from fakeplugin.cluster.state import cluster_nodes
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import load_inventory
from fakeplugin.model import ZERO_UUID
from tests.harness.paths import EXAMPLES, REPO

NVL72 = EXAMPLES / "gb200-nvl72.yaml"
RACK_A = "7c9e2d41-3a6b-4f10-8d52-5e8f30a1b2c4.2"
RACK_B = "1f4a8c63-b27e-4d95-a0f1-93c0d7e5a6f8.4026"


def header_commands(path: Path) -> list[list[str]]:
    """The `fakeplugin ...` command lines of the file's leading comment, without their trailing comments."""
    commands = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("# ").split("   #", 1)[0]
        if text.startswith("fakeplugin "):
            commands.append(shlex.split(text)[1:])
    return commands


def run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FAKEPLUGIN_INVENTORY", "NODE_NAME")}
    return subprocess.run(
        [sys.executable, "-m", "fakeplugin", *args],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def slices(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "ResourceSlice"]


def test_the_header_names_the_validate_and_render_commands() -> None:
    commands = header_commands(NVL72)
    assert [c[0] for c in commands] == ["validate"] + ["render"] * 5
    assert all(c[1:3] == ["--inventory", "examples/gb200-nvl72.yaml"] for c in commands)


@pytest.mark.parametrize("args", header_commands(NVL72), ids=shlex.join)
def test_every_header_command_runs(args: list[str]) -> None:
    result = run(args)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    if args[0] == "validate":
        valid = "valid: 37 nodes, 152 GPUs on 37 nodes (driver 580.126.20, CUDA 13.0)"
        assert result.stdout == f"examples/gb200-nvl72.yaml: {valid}\n"


@pytest.mark.parametrize("node", ["gb200-rack-a-0", "gb200-rack-b-17"])
def test_a_tray_of_each_rack_publishes_four_gb200_and_the_two_compute_domain_devices(node: str) -> None:
    [gpus] = slices(run(["render", "--inventory", str(NVL72), "--node", node]))
    assert gpus["spec"]["nodeName"] == node
    devices = gpus["spec"]["devices"]
    assert [d["name"] for d in devices] == [f"gpu-{i}" for i in range(4)]
    assert {d["attributes"]["productName"]["string"] for d in devices} == {"NVIDIA GB200"}
    assert {d["attributes"]["addressingMode"]["string"] for d in devices} == {"ATS"}
    [cd] = slices(run(["render", "--inventory", str(NVL72), "--node", node, "--plugin", "compute-domains"]))
    assert (cd["spec"]["driver"], [d["name"] for d in cd["spec"]["devices"]]) == (
        "compute-domain.nvidia.com",
        ["channel-0", "daemon-0"],
    )


def test_each_rack_is_its_own_clique_and_the_kubelet_node_has_none() -> None:
    inv = load_inventory(NVL72)
    nodes = {n.name: n for n in cluster_nodes(inv, 0)}
    assert len(nodes) == 37
    for rack, clique in (("a", RACK_A), ("b", RACK_B)):
        trays = [n for name, n in nodes.items() if name.startswith(f"gb200-rack-{rack}-")]
        assert len(trays) == 18
        # The entry's labels and its clique's, beside the GPU Operator's (tests/test_nodelabels.py).
        mine = {"rack": rack, GPU_CLIQUE_LABEL: clique}
        assert all(not n.kubelet and n.labels.items() >= mine.items() for n in trays)
        assert {n.labels["nvidia.com/gpu.product"] for n in trays} == {"NVIDIA-GB200"}
        assert inv.node_entry(f"gb200-rack-{rack}-0").clique_id == clique
    hgx = nodes["hgx-b200"]
    assert (hgx.kubelet, inv.node_entry("hgx-b200").clique_id) == (True, "")
    assert GPU_CLIQUE_LABEL not in hgx.labels and "rack" not in hgx.labels


@pytest.mark.parametrize(
    ("node", "clique", "cluster_uuid"),
    [
        ("gb200-rack-a-5", "2", RACK_A.split(".")[0]),
        ("gb200-rack-b-0", "4026", RACK_B.split(".")[0]),
        ("hgx-b200", "0", ZERO_UUID),  # the B200's fabric info outside a multi-node domain
    ],
)
def test_every_gpu_reports_its_nodes_fabric(node: str, clique: str, cluster_uuid: str) -> None:
    inv = load_inventory(NVL72)
    entry = inv.node_entry(node)
    assert entry is not None
    values = [smi.gpu_values(d) for d in devices_for_node(inv, entry, node)]
    assert {(v["fabric_state"], v["fabric_clique_id"], v["fabric_cluster_uuid"]) for v in values} == {
        ("Completed", clique, cluster_uuid)
    }
