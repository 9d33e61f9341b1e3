"""The fake `nvidia-smi topo` (prepare/nvidia-smi.*) against real output, and its agreement with the slice.

Real output: the two-H200 host's `topo -m` (tests/data/nvidia-smi-h200/smi_text.txt) and a one-H200 VM's
`topo -m`, `--matrix`, `-mp`, help and errors with exit codes (tests/data/nvidia-smi-topo, driver 580, taken
on an H200 of the device machine). Both hosts are VMs whose sysfs numa_node is -1. The matrix cells of other
layouts (NODE, SYS, PIX) follow the legend; no capture of a multi-NUMA host exists here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeplugin import releases
from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import load_inventory, parse_inventory
from fakeplugin.model import GpuDevice
from fakeplugin.render import render_documents
from tests.harness.nvidia_smi import captured, container_view, run_smi, smi_lines, write_claim
from tests.harness.smi_shells import SmiShell

TOPO = Path(__file__).resolve().parent / "data" / "nvidia-smi-topo"
NUMA_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "numa.yaml"
LEGEND_NV = "  NV#  = Connection traversing a bonded set of # NVLinks"


def topo_capture(file: str, section: str) -> tuple[list[str], int]:
    """One `### <section>` of a capture in tests/data/nvidia-smi-topo: its lines and exit code. The first
    file starts with `topo -m`'s output, headed by nothing."""
    lines = (TOPO / file).read_text().splitlines()
    start = 0 if section == "" else lines.index(f"### {section}") + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("### ")), len(lines))
    body = lines[start:end]
    rc = next((int(line[3:]) for line in body if line.startswith("rc=")), 0)
    return [line for line in body if not line.startswith("rc=")], rc


def cat_a(lines: list[str]) -> list[str]:
    """`cat -A` of lines, as the second capture file stores them (tab ^I, ESC ^[, line end $)."""
    return [line.replace("\t", "^I").replace("\x1b", "^[") + "$" for line in lines]


def node_devices(inventory: Path | dict, node: str) -> list[GpuDevice]:
    inv = load_inventory(inventory) if isinstance(inventory, Path) else parse_inventory(inventory)
    entry = inv.node_entry(node)
    assert entry is not None
    return devices_for_node(inv, entry, node)


def container(tmp_path: Path, devices: list[GpuDevice]) -> Path:
    """A container that got `devices` through one claim."""
    spec = write_claim(tmp_path / "plugin", tmp_path / "cdi", "0c000000-aaaa-4bbb-8ccc-dddddddddddd", devices)
    return container_view(tmp_path / "ctr", [(spec, [d.name for d in devices])])


def h200_vm(gpus: int) -> dict:
    """The captured H200 VMs as an inventory: GPUs at 00:06.0, 00:07.0, no NUMA information."""
    return {
        "driverVersion": "580.159.04",
        "cudaDriverVersion": "13.0",
        "nodes": [
            {
                "name": "vm",
                "gpus": [{"profile": "h200", "pciBusID": f"0000:00:0{6 + i}.0"} for i in range(gpus)],
            }
        ],
    }


# ---- against the captures -----------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["-m", "--matrix"])
def test_two_h200_matrix_is_the_captured_one(smi_shell: SmiShell, tmp_path: Path, option: str) -> None:
    root = container(tmp_path, node_devices(h200_vm(2), "vm"))
    assert smi_lines(smi_shell, root, "topo", option) == captured("topo -m")


def test_one_h200_matrix_help_and_errors_are_the_captured_ones(smi_shell: SmiShell, tmp_path: Path) -> None:
    root = container(tmp_path, node_devices(h200_vm(1), "vm"))
    matrix, _ = topo_capture("h200-1gpu-topo.txt", "")
    assert smi_lines(smi_shell, root, "topo", "-m") == matrix
    help_lines, _ = topo_capture("h200-1gpu-topo.txt", "topo -h")
    assert smi_lines(smi_shell, root, "topo", "-h") == help_lines
    for args in (["topo"], ["topo", "--help"]):  # topo alone prints its help too, exit 0
        result = run_smi(smi_shell, root, *args)
        assert (result.returncode, cat_a(result.stdout.splitlines())) == topo_capture(
            "h200-1gpu-topo-options.txt", "topo"
        )[::-1]
    for section in (
        "topo --matrix",
        "topo -mp",
        "topo --matrix_pci",
        "topo -m -i 0",
        "topo bogus",
        "topo -x",
    ):
        result = run_smi(smi_shell, root, *section.split())
        expected, rc = topo_capture("h200-1gpu-topo-options.txt", section)
        assert (result.returncode, cat_a(result.stdout.splitlines()), result.stderr) == (rc, expected, ""), (
            section
        )


def test_matrix_pci_shows_the_pcie_path_instead_of_nvlink(smi_shell: SmiShell, tmp_path: Path) -> None:
    root = container(tmp_path, node_devices(h200_vm(2), "vm"))
    lines = smi_lines(smi_shell, root, "topo", "-mp")
    # Both GPUs sit on the host bridge's root bus 00 (pcieRoot pci0000:00): PHB.
    assert lines[1:3] == ["GPU0\t X \tPHB\t0-31\t0\t\tN/A", "GPU1\tPHB\t X \t0-31\t0\t\tN/A"]
    assert LEGEND_NV not in lines and lines[-1].startswith("  PIX")


# ---- NUMA and PCIe layouts (examples/numa.yaml) --------------------------------------------------------


def test_hgx_gpus_are_nvlinked_and_show_their_numa_node_and_its_cpus(
    smi_shell: SmiShell, tmp_path: Path
) -> None:
    gpus = node_devices(NUMA_EXAMPLE, "hgx-h100")
    root = container(tmp_path, [gpus[0], gpus[3], gpus[4]])
    assert smi_lines(smi_shell, root, "topo", "-m")[:4] == [
        "\t\x1b[4mGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
        "GPU0\t X \tNV18\tNV18\t0-111\t0\t\tN/A",
        "GPU1\tNV18\t X \tNV18\t0-111\t0\t\tN/A",
        "GPU2\tNV18\tNV18\t X \t112-223\t1\t\tN/A",
    ]
    # Without NVLink, the PCIe path: different roots, NODE on one NUMA node and SYS across.
    assert [line.split("\t")[1:4] for line in smi_lines(smi_shell, root, "topo", "-mp")[1:4]] == [
        [" X ", "NODE", "SYS"],
        ["NODE", " X ", "SYS"],
        ["SYS", "SYS", " X "],
    ]


def test_pcie_cards_show_pix_node_and_sys(smi_shell: SmiShell, tmp_path: Path) -> None:
    root = container(tmp_path, node_devices(NUMA_EXAMPLE, "pcie-l40s"))
    assert smi_lines(smi_shell, root, "topo", "-m")[1:5] == [
        "GPU0\t X \tPIX\tNODE\tSYS\t0-31\t0\t\tN/A",
        "GPU1\tPIX\t X \tNODE\tSYS\t0-31\t0\t\tN/A",
        "GPU2\tNODE\tNODE\t X \tSYS\t0-31\t0\t\tN/A",
        "GPU3\tSYS\tSYS\tSYS\t X \t32-63\t1\t\tN/A",
    ]


def test_the_matrix_shows_only_the_containers_gpus_renumbered(smi_shell: SmiShell, tmp_path: Path) -> None:
    gpus = node_devices(NUMA_EXAMPLE, "pcie-l40s")
    root = container(tmp_path, [gpus[3], gpus[1]])
    assert smi_lines(smi_shell, root, "topo", "-m")[:3] == [
        "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m",
        "GPU0\t X \tSYS\t0-31\t0\t\tN/A",
        "GPU1\tSYS\t X \t32-63\t1\t\tN/A",
    ]


def gb200_tray(**fields: object) -> dict:
    node = {"name": "tray", "gpus": [{"profile": "gb200", "count": 4}], **fields}
    return {"driverVersion": "580.126.20", "cudaDriverVersion": "13.0", "nodes": [node]}


def test_a_gb200_tray_shows_its_gpus_memory_numa_nodes(smi_shell: SmiShell, tmp_path: Path) -> None:
    """sgl-project/sglang#11208's `topo -m` of a GB200 tray (570.172.08), the GPU and NUMA columns: each
    GPU's memory is 8 NUMA nodes after the 2 Grace CPUs' (GPU NUMA ID 2, 10, 18; the capture cuts GPU3's
    row before its ID), NUMA Affinity the CPU's node plus its GPUs' other nodes."""
    gpus = node_devices(gb200_tray(numaNodes=2, cpus=144), "tray")
    rows = smi_lines(smi_shell, container(tmp_path, gpus), "topo", "-m")[1:5]
    assert [row.split("\t")[5:] for row in rows] == [
        ["0-71", "0,3-9,11-17", "", "2"],
        ["0-71", "0,3-9,11-17", "", "10"],
        ["72-143", "1,19-25,27-33", "", "18"],
        ["72-143", "1,19-25,27-33", "", "26"],
    ]
    # A container with two of them: the same nodes (they are the host's), renumbered GPUs.
    rows = smi_lines(smi_shell, container(tmp_path / "two", [gpus[1], gpus[2]]), "topo", "-m")[1:3]
    assert [row.split("\t")[3:] for row in rows] == [
        ["0-71", "0,3-9,11-17", "", "10"],
        ["72-143", "1,19-25,27-33", "", "18"],
    ]
    # NUMA unknown (no numaNodes): nothing to number after, as without a NUMA layout.
    rows = smi_lines(smi_shell, container(tmp_path / "vm", node_devices(gb200_tray(), "tray")), "topo", "-m")
    assert {tuple(row.split("\t")[5:]) for row in rows[1:5]} == {("0-63", "0", "", "N/A")}


@pytest.mark.parametrize("gates", ["", "DRAListTypeAttributes=true"])
def test_topo_numa_affinity_is_the_published_numa_node(
    smi_shell: SmiShell, tmp_path: Path, gates: str
) -> None:
    """For every GPU of the example, 0.5.0-dev's numaNode (int, or the list with the gate) is what the data
    file and `topo -m` say; a GPU without the attribute (NUMA unknown) reads N/A and topo shows NUMA 0."""
    inv = load_inventory(NUMA_EXAMPLE)
    release = releases.get("0.5.0-dev").with_gates({"DRAListTypeAttributes": gates != ""})
    published = {
        (s["spec"]["nodeName"], d["name"]): d["attributes"].get("resource.kubernetes.io/numaNode")
        for s in render_documents(inv, release=release)
        if s["kind"] == "ResourceSlice"
        for d in s["spec"]["devices"]
    }
    seen = set()
    for entry in inv.nodes:
        (node,) = entry.node_names()
        devices = node_devices(NUMA_EXAMPLE, node)
        root = container(tmp_path / node, devices)
        rows = smi_lines(smi_shell, root, "topo", "-m")[1 : 1 + len(devices)]
        for device, row in zip(devices, rows, strict=True):
            attribute = published[(node, device.name)]
            data = (root / f"run/fakeplugin/gpus/{device.name}.env").read_text().splitlines()
            if attribute is None:
                assert "numa_node=N/A" in data and row.split("\t")[-3] == "0"
                seen.add("unknown")
                continue
            n = attribute["ints"][0] if gates else attribute["int"]
            assert attribute == ({"ints": [n]} if gates else {"int": n})
            assert f"numa_node={n}" in data and row.split("\t")[-3] == str(n)
            seen.add(n)
    assert seen == {0, 1, "unknown"}
