"""The fake nvidia-smi's Fabric report (`-q`'s Fabric section, the fabric.* query fields) for GPUs of a
multi-node NVLink fabric (the inventory's nodes[].fabric), of models outside one, and under the fabric-state
fault; run as in tests/test_nvidia_smi.py, under each shell and awk (the `smi_shell` fixture), and compared
with the captures of tests/data/nvidia-smi-h200 and NVIDIA/k8s-test-infra's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.faults import fabricfaults
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import ZERO_UUID, GpuDevice
from tests.harness.golden import check_golden_text
from tests.harness.nvidia_smi import (
    CAPTURES,
    TIMESTAMP,
    UUID_A,
    container_view,
    parse_q,
    smi_lines,
    two_h200_view,
    write_claim,
)
from tests.harness.smi_shells import SmiShell


@pytest.fixture
def h200_host(tmp_path: Path) -> Path:
    return two_h200_view(tmp_path)


# ---- a multi-node NVLink fabric (the inventory's nodes[].fabric) --------------------------------------

CLUSTER_UUID = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"


def gb200_tray(fabric: bool = True) -> list[GpuDevice]:
    """The 4 GPUs of one GB200 NVL72 compute tray in clique 2 of CLUSTER_UUID (without `fabric`: none)."""
    node: dict[str, object] = {"name": "gb200-rack-a-0", "gpus": [{"profile": "gb200", "count": 4}]}
    if fabric:
        node["fabric"] = {"clique": 2, "clusterUUID": CLUSTER_UUID.upper()}
    inv = parse_inventory({"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [node]})
    return devices_for_node(inv, inv.nodes[0], "gb200-rack-a-0")


def tray_view(tmp_path: Path, devices: Sequence[GpuDevice]) -> Path:
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", UUID_A, devices)
    return container_view(tmp_path / "ctr", [(spec, [d.name for d in devices])])


def test_every_gpu_of_a_fabric_node_reports_its_clique(smi_shell: SmiShell, tmp_path: Path) -> None:
    root = tray_view(tmp_path, gb200_tray())
    lines = smi_lines(smi_shell, root, "-q")
    fabric = [
        "    Fabric",
        "        State                                          : Completed",
        "        Status                                         : Success",
        "        CliqueId                                       : 2",
        f"        ClusterUUID                                    : {CLUSTER_UUID}",
        "        Health",
    ]
    starts = [i for i, line in enumerate(lines) if line == "    Fabric"]
    assert len(starts) == 4
    for i in starts:
        assert lines[i : i + 6] == fabric
        assert lines[i + 13] == "    Processes                                          : None"
    # Keys and their order are the real report's (the H200 capture prints the same Fabric keys).
    real = parse_q((CAPTURES / "smi_q.txt").read_text().splitlines())[1]
    real_keys = iter(key for key, _ in real)
    assert all(key in real_keys for key, _ in parse_q(lines)[1])
    query = "--query-gpu=index,fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid"
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        f"{i}, Completed, Success, 2, {CLUSTER_UUID}" for i in range(4)
    ]
    health = "--query-gpu=fabric.health.summary,fabric.health.bandwidth,fabric.health.route_unhealthy"
    assert smi_lines(smi_shell, root, health + ",fabric.health.partition_assigned", "--format=csv") == [
        "fabric.health.summary, fabric.health.bandwidth, fabric.health.route_unhealthy, "
        "fabric.health.partition_assigned",
        *["Healthy, Full, False, [N/A]"] * 4,
    ]
    # -d shows only its types: Fabric is none of them (580's -h lists no FABRIC type).
    assert "    Fabric" not in smi_lines(smi_shell, root, "-q", "-d", "MEMORY,COMPUTE,ECC")


def fabric_section(lines: Sequence[str]) -> list[list[str]]:
    """Each GPU's `-q` Fabric section: its header line and the 12 rows under it."""
    return [list(lines[i : i + 13]) for i, line in enumerate(lines) if line == "    Fabric"]


def test_a_gpu_outside_a_multi_node_domain_reports_the_captured_fabric(
    smi_shell: SmiShell, h200_host: Path
) -> None:
    """The HGX H200 capture: registered, CliqueId 0, the zero ClusterUUID, every health row N/A."""
    real = fabric_section((CAPTURES / "smi_q.txt").read_text().splitlines())
    assert len(real) == 2
    assert fabric_section(smi_lines(smi_shell, h200_host, "-q")) == real
    query = "--query-gpu=fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid,fabric.health.summary"
    assert (
        smi_lines(smi_shell, h200_host, query, "--format=csv,noheader")
        == ["Completed, Success, 0, 00000000-0000-0000-0000-000000000000, [N/A]"] * 2
    )


def one_gpu_node(tmp_path: Path, profile: str) -> Path:
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": [{"profile": profile}]}],
        }
    )
    return tray_view(tmp_path, devices_for_node(inv, inv.nodes[0], "n"))


def test_the_fabric_state_fault_changes_a_gpu_outside_a_domain(smi_shell: SmiShell, tmp_path: Path) -> None:
    """Merged truth of the per-profile Fabric section and the fabric-state fault: a GPU whose model registers
    outside a multi-node domain (B200: CliqueId 0, the zero ClusterUUID, its captured health) reports the
    fault's state as a rack GPU does; a model whose fabric rows are all N/A (T4) is not changed by it."""
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": [{"profile": "b200", "count": 3}, {"profile": "t4"}]}],
        }
    )
    devices = devices_for_node(inv, inv.nodes[0], "n")
    faults = fabricfaults.parse_fabric_faults(
        "gpu-1=InProgress,gpu-2=Completed:ERROR_TIMEOUT,gpu-3=NotStarted"
    )
    assert fabricfaults.unknown_devices(faults, devices) == ["gpu-3"]
    root = tray_view(tmp_path, fabricfaults.with_fabric_faults(devices, faults))
    query = "--query-gpu=index,fabric.state,fabric.status,fabric.cliqueId,fabric.clusterUuid"
    query += ",fabric.health.summary"
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        f"0, Completed, Success, 0, {ZERO_UUID}, Healthy",
        "1, In Progress, [N/A], [N/A], [N/A], [N/A]",
        f"2, Completed, Timeout, 0, {ZERO_UUID}, [N/A]",
        "3, [N/A], [N/A], [N/A], [N/A], [N/A]",
    ]
    sections = fabric_section(smi_lines(smi_shell, root, "-q"))
    assert [row.split(":", 1)[1].strip() for row in sections[1] if ":" in row] == [
        "In Progress",
        *["N/A"] * 10,
    ]


def test_a_gpu_without_fabric_info_prints_every_fabric_row_n_a(smi_shell: SmiShell, tmp_path: Path) -> None:
    """The T4 capture (NVIDIA/k8s-test-infra qx-t4.xml): state, status, clique, cluster and health N/A."""
    lines = smi_lines(smi_shell, one_gpu_node(tmp_path, "t4"), "-q")
    [section] = fabric_section(lines)
    assert section[0] == "    Fabric" and section[5] == "        Health"
    assert all(row.endswith(" : N/A") for row in section[1:5] + section[6:])
    query = "--query-gpu=fabric.state,fabric.cliqueId,fabric.clusterUuid,fabric.health.bandwidth"
    root = one_gpu_node(tmp_path / "again", "t4")
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == ["[N/A], [N/A], [N/A], [N/A]"]


def test_a_b200_outside_a_domain_reports_its_captured_health(smi_shell: SmiShell, tmp_path: Path) -> None:
    """NVIDIA/k8s-test-infra qx-b200.xml: registered with the zero ClusterUUID, Summary Healthy and Access
    Timeout Recovery False, the other health rows N/A."""
    health = "--query-gpu=fabric.clusterUuid,fabric.health.summary,fabric.health.bandwidth"
    query = health + ",fabric.health.access_timeout_recovery"
    root = one_gpu_node(tmp_path, "b200")
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        "00000000-0000-0000-0000-000000000000, Healthy, [N/A], False"
    ]


def test_a_model_whose_fabric_info_is_unknown_prints_no_fabric(smi_shell: SmiShell, tmp_path: Path) -> None:
    devices = [replace(d, board=replace(d.board, fabric_report=None)) for d in gb200_tray(fabric=False)]
    assert all("fabric" not in line for d in devices for line in smi.render_data(d).splitlines())
    root = tray_view(tmp_path, devices)
    assert "    Fabric" not in smi_lines(smi_shell, root, "-q")
    assert (
        smi_lines(smi_shell, root, "--query-gpu=fabric.state,fabric.cliqueId", "--format=csv,noheader")
        == ["[N/A], [N/A]"] * 4
    )


def test_query_report_of_one_gb200_gpu_with_a_fabric_is_golden(smi_shell: SmiShell, tmp_path: Path) -> None:
    """tests/golden/nvidia-smi-q-gb200-fabric.txt, the Timestamp masked; regenerate with UPDATE_GOLDEN=1."""
    root = tray_view(tmp_path, gb200_tray()[:1])
    lines = smi_lines(smi_shell, root, "-q")
    assert lines[3].startswith("Timestamp ") and TIMESTAMP.fullmatch(lines[3].split(" : ", 1)[1])
    lines[3] = lines[3].split(" : ", 1)[0] + " : <timestamp>"
    check_golden_text("nvidia-smi-q-gb200-fabric.txt", "\n".join(lines) + "\n")


def test_the_fabric_state_fault_is_what_an_unregistered_gpu_reports(
    smi_shell: SmiShell, tmp_path: Path
) -> None:
    faults = fabricfaults.parse_fabric_faults(
        "gpu-1=InProgress,gpu-2=Completed:ERROR_TIMEOUT,gpu-3=NotStarted"
    )
    root = tray_view(tmp_path, fabricfaults.with_fabric_faults(gb200_tray(), faults))
    lines = smi_lines(smi_shell, root, "-q")
    starts = [i for i, line in enumerate(lines) if line == "    Fabric"]
    sections = [
        [line.split(":", 1)[1].strip() for line in lines[i + 1 : i + 13] if ":" in line] for i in starts
    ]
    healthy = ["Healthy", "Full", "False", "False", "False", "N/A", "N/A"]
    assert sections == [
        ["Completed", "Success", "2", CLUSTER_UUID, *healthy],
        # NVIDIA/gpu-operator#2511: a GB200 GPU whose registration is In Progress.
        ["In Progress", "N/A", "N/A", "N/A", *["N/A"] * 7],
        ["Completed", "Timeout", "2", CLUSTER_UUID, *["N/A"] * 7],
        ["Not Started", "N/A", "N/A", "N/A", *["N/A"] * 7],
    ]
    query = "--query-gpu=index,fabric.state,fabric.status,fabric.cliqueId,fabric.health.summary"
    assert smi_lines(smi_shell, root, query, "--format=csv,noheader") == [
        "0, Completed, Success, 2, Healthy",
        "1, In Progress, [N/A], [N/A], [N/A]",
        "2, Completed, Timeout, 2, [N/A]",
        "3, Not Started, [N/A], [N/A], [N/A]",
    ]
