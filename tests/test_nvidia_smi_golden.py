"""Golden `nvidia-smi -q` and `topo -m` of the Blackwell profiles, as a container that got every GPU of one
node sees them (tests/golden/nvidia-smi-q-<profile>.txt, nvidia-smi-topo-<profile>.txt; the -q Timestamp
masked). Regenerate with UPDATE_GOLDEN=1 and review the diff against real output: the profiles' sources.

Each node is the model's usual one: HGX B200/B300 baseboards of 8 GPUs through NVSwitch, a GB200/GB300 NVL72
compute tray of 4 GPUs in a clique (2 as the p6e-gb200 capture, 32766 as the GB300 capture, both
NVIDIA/k8s-test-infra testdata/hardware), a Vera Rubin compute tray of 4 GPUs in clique 32766 (as its
pre-release capture qx-vrnvl72; its CPUs' NUMA layout unknown, so none given), two RTX PRO 6000 Server
Edition PCIe cards. The -q golden holds the
first GPU only (every GPU prints the same keys).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from tests.harness.golden import check_golden_text
from tests.harness.nvidia_smi import container_view, smi_lines, write_claim
from tests.harness.smi_shells import SmiShell

CLUSTER_UUID = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
HGX = {"numaNodes": 2, "cpus": 224}  # DGX B200: 2 NUMA nodes of 112 CPUs (vllm-project/vllm#13855)
HGX_B300 = {"numaNodes": 2, "cpus": 192}  # 2 NUMA nodes of 96 CPUs (vllm-project/vllm#30441)
TRAY = {"numaNodes": 2, "cpus": 144}  # two Grace CPUs, 0-71 and 72-143 (sgl-project/sglang#11208 `topo -m`)
# profile → (GPUs on the node, more fields of its inventory entry)
NODES: dict[str, tuple[int, dict[str, Any]]] = {
    "b200": (8, HGX),
    "b300": (8, HGX_B300),
    "gb200": (4, {**TRAY, "fabric": {"clique": 2, "clusterUUID": CLUSTER_UUID}}),
    "gb300": (4, {**TRAY, "fabric": {"clique": 32766, "clusterUUID": CLUSTER_UUID}}),
    "vr200": (4, {"fabric": {"clique": 32766, "clusterUUID": CLUSTER_UUID}}),
    "rtx-pro-6000-blackwell-server": (2, {}),
}
TIMESTAMP = re.compile(r"^(Timestamp +: ).*$", re.MULTILINE)


def node_devices(profile: str) -> list[GpuDevice]:
    count, fields = NODES[profile]
    node = {"name": f"node-{profile}", "gpus": [{"profile": profile, "count": count}], **fields}
    inv = parse_inventory({"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [node]})
    return devices_for_node(inv, inv.nodes[0], node["name"])


def container(tmp_path: Path, devices: list[GpuDevice]) -> Path:
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", "0d000000-aaaa-4bbb-8ccc-dddddddddddd", devices)
    return container_view(tmp_path / "ctr", [(spec, [d.name for d in devices])])


@pytest.mark.parametrize("profile", NODES)
def test_query_report_of_the_first_gpu_is_golden(smi_shell: SmiShell, tmp_path: Path, profile: str) -> None:
    root = container(tmp_path, node_devices(profile)[:1])
    text = "\n".join(smi_lines(smi_shell, root, "-q")) + "\n"
    masked, stamps = TIMESTAMP.subn(r"\1<timestamp>", text)
    assert stamps == 1
    check_golden_text(f"nvidia-smi-q-{profile}.txt", masked)


@pytest.mark.parametrize("profile", NODES)
def test_topology_matrix_of_the_node_is_golden(smi_shell: SmiShell, tmp_path: Path, profile: str) -> None:
    root = container(tmp_path, node_devices(profile))
    check_golden_text(
        f"nvidia-smi-topo-{profile}.txt", "\n".join(smi_lines(smi_shell, root, "topo", "-m")) + "\n"
    )
