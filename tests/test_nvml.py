"""The mock NVML library (fakeplugin/nvml) through a real consumer: nvidia-ml-py (pynvml) in a subprocess
that finds it by name (tests/harness/nvml_probe.py), reading the description nvmldata writes for a claim's
devices. Expected values are derived here from the node's ResourceSlices (what the scheduler and users
see) and the inventory, never from the description: full GPUs of the reference lab (T10, RTX A5000), a
static MIG layout, a DynamicMIG partition and a full GPU under DynamicMIG. Also: NVML's codes for what is
not emulated, a missing or corrupt description failing nvmlInit cleanly, the exported symbol set (every
function a Go program on go-nvml may resolve), the build, and NVML agreeing with the fake nvidia-smi.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from fakeplugin import mig, nvml, quantity
from fakeplugin.drivers.gpu.prepare import nvmldata, smi
from fakeplugin.model import GpuDevice
from fakeplugin.nvml import build
from tests.harness.nvml import (
    A5000_NODE,
    STATIC_MIG,
    T10_NODE,
    attribute,
    describe,
    inventory,
    probe,
    published,
)
from tests.harness.paths import SEED_LAB

NOT_SUPPORTED = {"error": pynvml.NVML_ERROR_NOT_SUPPORTED}
MIB = 1024 * 1024


def see(nvml_library: Path, tmp_path: Path, devices: Sequence[GpuDevice]) -> dict[str, Any]:
    """What pynvml reports in a container that got `devices`."""
    seen, stderr = probe(nvml_library.parent, describe(tmp_path / "nvml", devices))
    assert stderr == ""
    assert seen["init"] == 0
    return seen


def nvml_bus_id(attribute_value: str) -> str:
    """The slice's `0000:1b:00.0` as NVML writes it: 8-digit domain, upper case."""
    domain, rest = attribute_value.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def memory_bytes(entry: dict[str, Any]) -> int:
    return quantity.value(entry["capacity"]["memory"]["value"])


def assert_full_gpu(seen: dict[str, Any], entry: dict[str, Any], index: int, minor: int) -> None:
    bus_id = nvml_bus_id(attribute(entry, "resource.kubernetes.io/pciBusID"))
    assert seen["index"] == index
    assert seen["minor"] == minor
    assert seen["name"] == attribute(entry, "productName")
    assert seen["uuid"] == attribute(entry, "uuid")
    assert seen["pci"]["busId"] == bus_id
    assert seen["pci"]["busIdLegacy"] == bus_id[4:]
    assert seen["pci"]["bus"] == int(bus_id.split(":")[1], 16)
    assert seen["memory"]["v1"]["total"] == memory_bytes(entry)
    assert seen["memory"]["v2"]["total"] == memory_bytes(entry)
    assert seen["memory"]["v1"]["free"] + seen["memory"]["v1"]["used"] == memory_bytes(entry)
    assert seen["memory"]["v2"]["used"] == 0
    cc = attribute(entry, "cudaComputeCapability").split(".")
    assert seen["cc"] == [int(cc[0]), int(cc[1])]
    assert seen["by_uuid"] == index
    assert seen["by_pci"] == index
    assert seen["by_short_pci"] == index
    assert seen["is_mig"] == 0
    assert seen["utilization"] == {"gpu": 0, "memory": 0}
    assert seen["processes"] == []
    # What no profile knows and no emulation measures: NVML's own code, as nvidia-smi prints N/A.
    assert seen["clock_sm"] == NOT_SUPPORTED
    assert seen["max_clock_sm"] == NOT_SUPPORTED
    assert seen["ecc_mode"] == NOT_SUPPORTED


# ---- full GPUs: the reference lab ---------------------------------------------------------------------


def test_reference_lab_t10_node_sees_its_two_gpus(nvml_library: Path, tmp_path: Path) -> None:
    inv = inventory(SEED_LAB.read_text(encoding="utf-8"))
    devices, entries = published(inv, T10_NODE)
    seen = see(nvml_library, tmp_path, [devices["gpu-0"], devices["gpu-1"]])
    assert seen["count"] == 2
    assert seen["torch_count"] == 2  # PyTorch's raw ctypes path: the unversioned nvmlInit
    assert seen["driver_version"] == inv.driver_version
    assert seen["cuda_driver_version"] == 13000 == seen["cuda_driver_version_v2"]
    assert seen["nvml_version"] == f"13.{inv.driver_version}"
    for index, name in enumerate(["gpu-0", "gpu-1"]):
        gpu = seen["gpus"][index]
        assert_full_gpu(gpu, entries[name], index=index, minor=index)
        assert gpu["name"] == "NVIDIA T10"
        assert gpu["architecture"] == pynvml.NVML_DEVICE_ARCH_TURING
        assert gpu["brand"] == pynvml.NVML_BRAND_NVIDIA
        assert gpu["mig_mode"] == NOT_SUPPORTED  # not MIG capable
        assert gpu["max_mig_devices"] == 0
        assert gpu["migs"] == []
        assert gpu["power_limit"] == NOT_SUPPORTED  # the T10 profile knows none; nvidia-smi: N/A
    assert seen["gpus"][0]["uuid"] != seen["gpus"][1]["uuid"]
    assert seen["out_of_range"] == {"error": pynvml.NVML_ERROR_INVALID_ARGUMENT}
    assert seen["unknown_uuid"] == {"error": pynvml.NVML_ERROR_NOT_FOUND}


def test_a_container_counts_its_gpus_from_zero(nvml_library: Path, tmp_path: Path) -> None:
    """A claim with the node's second GPU only: NVML index 0, the host's minor 1 (/dev/nvidia1)."""
    devices, entries = published(inventory(SEED_LAB.read_text(encoding="utf-8")), T10_NODE)
    seen = see(nvml_library, tmp_path, [devices["gpu-1"]])
    assert seen["count"] == 1
    assert_full_gpu(seen["gpus"][0], entries["gpu-1"], index=0, minor=1)


def test_reference_lab_rtx_a5000_with_ecc(nvml_library: Path, tmp_path: Path) -> None:
    devices, entries = published(inventory(SEED_LAB.read_text(encoding="utf-8")), A5000_NODE)
    seen = see(nvml_library, tmp_path, [devices["gpu-0"]])
    assert seen["count"] == 1
    gpu = seen["gpus"][0]
    assert_full_gpu(gpu, entries["gpu-0"], index=0, minor=0)
    assert gpu["name"] == "NVIDIA RTX A5000"
    assert gpu["memory"]["v1"]["total"] == 23028 * MIB  # with ECC on, as nvidia-smi shows it (issue 1)
    assert gpu["architecture"] == pynvml.NVML_DEVICE_ARCH_AMPERE
    assert gpu["cc"] == [8, 6]


# ---- MIG -----------------------------------------------------------------------------------------------


def test_static_mig_devices_under_their_parents(nvml_library: Path, tmp_path: Path) -> None:
    devices, entries = published(inventory(STATIC_MIG), "mig-node")
    mine = ["gpu-0-mig-1g5gb-19-5", "gpu-0-mig-3g20gb-9-0", "gpu-1-mig-1g5gb-19-4"]
    assert set(mine) <= devices.keys()
    seen = see(nvml_library, tmp_path, [devices[name] for name in mine])
    assert seen["count"] == 2  # the physical GPUs of the container's MIG devices
    parents = [attribute(entries[name], "parentUUID") for name in ("gpu-0-mig-3g20gb-9-0", mine[2])]
    assert [gpu["uuid"] for gpu in seen["gpus"]] == parents
    by_gpu = [["gpu-0-mig-3g20gb-9-0", "gpu-0-mig-1g5gb-19-5"], ["gpu-1-mig-1g5gb-19-4"]]  # placement order
    for gpu, names in zip(seen["gpus"], by_gpu, strict=True):
        assert gpu["name"] == "NVIDIA A100-SXM4-40GB"
        assert gpu["mig_mode"] == [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]
        assert gpu["max_mig_devices"] == 7  # A100: seven 1g.5gb
        found = [m for m in gpu["migs"] if "error" not in m]
        assert gpu["migs"][len(found) :] == [{"error": pynvml.NVML_ERROR_NOT_FOUND}] * (7 - len(found))
        assert [m["uuid"] for m in found] == [attribute(entries[n], "uuid") for n in names]
        for m, name in zip(found, names, strict=True):
            entry = entries[name]
            assert m["name"] == f"NVIDIA A100-SXM4-40GB MIG {attribute(entry, 'profile')}"
            assert m["is_mig"] == 1
            assert m["parent_uuid"] == gpu["uuid"] == attribute(entry, "parentUUID")
            assert m["memory"]["v1"]["total"] == memory_bytes(entry)
            assert m["memory"]["v2"]["reserved"] == 0
            assert m["gpu_instance_id"] == mig.gpu_instance_id(devices[name])  # as DCGM's series show it
            assert m["compute_instance_id"] == 0
            assert m["pci"]["busId"] == gpu["pci"]["busId"]
            assert m["by_uuid"] == m["uuid"]
            assert m["mig_mode"] == NOT_SUPPORTED  # a MIG device is not itself MIG capable
            assert m["temperature"] == NOT_SUPPORTED
    assert [m["gpu_instance_id"] for m in seen["gpus"][0]["migs"][:2]] == [1, 12]  # 3g at 0; 1g at 5


DYNAMIC_MIG = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: dyn-node
  gpus:
  - profile: h200
"""


def test_dynamic_mig_partition_created_for_the_claim(nvml_library: Path, tmp_path: Path) -> None:
    devices, entries = published(inventory(DYNAMIC_MIG), "dyn-node", dynamic_mig=True)
    name = "gpu-0-mig-1g18gb-19-3"
    assert "uuid" not in entries[name]["attributes"]  # a partition has none until Prepare creates it
    claim_uid = "3f0c8a52-0000-4000-8000-00000000c1a1"
    seen = see(nvml_library, tmp_path, [mig.created_for_claim(devices[name], claim_uid)])
    parent = attribute(entries[name], "parentUUID")
    assert seen["count"] == 1
    gpu = seen["gpus"][0]
    assert gpu["uuid"] == parent == attribute(entries["gpu-0"], "uuid")
    assert gpu["name"] == attribute(entries["gpu-0"], "productName") == "NVIDIA H200"
    assert gpu["mig_mode"] == [1, 1]
    [partition] = [m for m in gpu["migs"] if "error" not in m]
    assert partition["uuid"] == mig.mig_uuid(parent, 19, 3, claim_uid)
    assert partition["name"] == "NVIDIA H200 MIG 1g.18gb"
    assert partition["memory"]["v1"]["total"] == memory_bytes(entries[name])


def test_dynamic_mig_full_gpu_has_mig_mode_off(nvml_library: Path, tmp_path: Path) -> None:
    devices, entries = published(inventory(DYNAMIC_MIG), "dyn-node", dynamic_mig=True)
    seen = see(nvml_library, tmp_path, [devices["gpu-0"]])
    gpu = seen["gpus"][0]
    assert gpu["uuid"] == attribute(entries["gpu-0"], "uuid")
    assert gpu["mig_mode"] == [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE]
    assert gpu["max_mig_devices"] == 0
    assert gpu["architecture"] == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert gpu["power_limit"] == 700_000  # mW: the H200 capture's 700.00 W


def test_nvml_agrees_with_the_fake_nvidia_smi(nvml_library: Path, tmp_path: Path) -> None:
    """One source of truth: what NVML answers is what the container's nvidia-smi data file prints."""
    devices, _ = published(inventory(DYNAMIC_MIG), "dyn-node")
    device = devices["gpu-0"]
    gpu = see(nvml_library, tmp_path, [device])["gpus"][0]
    printed = smi.gpu_values(device)
    assert gpu["name"] == printed["name"]
    assert gpu["uuid"] == printed["uuid"]
    assert gpu["serial"] == printed["serial"]
    assert gpu["pci"]["busId"] == printed["bus_id"]
    assert f"0x{gpu['pci']['pciDeviceId']:08X}" == printed["pci_device_id"]
    assert f"0x{gpu['pci']['pciSubSystemId']:08X}" == printed["pci_subsystem_id"]
    assert str(gpu["minor"]) == printed["minor"]
    assert gpu["memory"]["v2"]["total"] // MIB == int(printed["memory_total_mib"])
    assert gpu["memory"]["v2"]["reserved"] // MIB == int(printed["memory_reserved_mib"])
    assert f"{gpu['cc'][0]}.{gpu['cc'][1]}" == printed["compute_cap"]
    assert f"{gpu['power_limit'] / 1000:.2f}" == printed["power_limit_w"]
    assert f"{gpu['power_usage'] / 1000:.2f}" == printed["power_draw_w"]
    assert str(gpu["temperature"]) == printed["temperature_c"]
    assert gpu["mig_mode"] == [0, 0] and printed["mig_mode"] == "Disabled"


# ---- NVML's codes, and a host process that survives --------------------------------------------------


def test_raw_calls_give_nvml_codes(nvml_library: Path, tmp_path: Path) -> None:
    devices, _ = published(inventory(SEED_LAB.read_text(encoding="utf-8")), T10_NODE)
    seen, stderr = probe(nvml_library.parent, describe(tmp_path / "nvml", [devices["gpu-0"]]), "raw")
    assert stderr == ""
    assert seen["count_before_init"] == pynvml.NVML_ERROR_UNINITIALIZED
    assert seen["stub_before_init"] == pynvml.NVML_ERROR_UNINITIALIZED
    assert seen["init"] == seen["init_again"] == pynvml.NVML_SUCCESS
    assert seen["stub_after_init"] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert seen["null_handle"] == seen["stray_handle"] == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert seen["handle"] == pynvml.NVML_SUCCESS
    assert seen["null_output"] == seen["null_count"] == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert seen["small_buffer"] == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert seen["unversioned_count"] == 0 and seen["unversioned_count_value"] == 1
    assert seen["memory_v2_unversioned"] == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert seen["shutdowns"] == [0, 0, 0]  # two inits; a third shutdown is no error (nvml.h)
    assert seen["count_after_shutdown"] == pynvml.NVML_ERROR_UNINITIALIZED
    strings = {int(code): text for code, text in seen["error_strings"].items()}
    for code, text in pynvml.NVMLError._errcode_to_string.items():
        assert strings[code] == text, code  # the binding's own table, where it has one
    assert strings[12345] == "Unknown Error"


def test_missing_description_fails_init_cleanly(nvml_library: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-directory"
    seen, stderr = probe(nvml_library.parent, missing)
    assert seen["init"] == pynvml.NVML_ERROR_DRIVER_NOT_LOADED  # as on a node without NVIDIA's driver
    assert seen["message"] == "Driver Not Loaded"
    assert seen["torch_count"] == {"error": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}
    assert stderr.count("\n") == 2  # one line per nvmlInit: pynvml's, then PyTorch's
    assert stderr.splitlines()[0] == (
        f"fakeplugin NVML: no GPUs: description {missing}: cannot read it: No such file or directory"
    )


def test_empty_description_fails_init_cleanly(nvml_library: Path, tmp_path: Path) -> None:
    (tmp_path / "gpu-0.env").write_text("uuid=GPU-1\n", encoding="utf-8")  # not a description file
    seen, stderr = probe(nvml_library.parent, tmp_path)
    assert seen["init"] == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert stderr.splitlines()[0] == f"fakeplugin NVML: no GPUs: description {tmp_path}: no *.nvml file"


def test_default_description_directory(nvml_library: Path) -> None:
    _, stderr = probe(nvml_library.parent, None)
    assert f"description {nvmldata.DESCRIPTION_CONTAINER_DIR}: cannot read it" in stderr.splitlines()[0]
    source = Path(build.__file__).parent
    assert f'#define DESCRIPTION_ENV "{nvml.DESCRIPTION_ENV}"' in (source / "nvml.c").read_text()
    assert f'#define DEFAULT_DIR "{nvmldata.DESCRIPTION_CONTAINER_DIR}"' in (source / "nvml.c").read_text()
    assert f"#define FORMAT {nvmldata.FORMAT}\n" in (source / "description.c").read_text()


SYSTEM = "format=1\ndriver_version=580.95.05\n"
GOOD = SYSTEM + "[gpu]\nname=NVIDIA T10\nuuid=GPU-1\nbus_id=00000000:1B:00.0\n"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "/gpu-0.nvml: no [gpu]"),
        ("\xff garbage\n", "/gpu-0.nvml: line 1: a line that is neither key=value nor a section"),
        (GOOD.replace("T10", "T\x0010"), "/gpu-0.nvml: line 4: a NUL byte"),
        (GOOD.replace("format=1", "format=2"), '/gpu-0.nvml: no "format=1" line'),
        (GOOD.replace("driver_version=580.95.05\n", ""), "/gpu-0.nvml: no driver_version"),
        (GOOD + "minor=-1\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "minor=4294967296\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "memory_total=12x\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "colour=green\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "name=" + "N" * 96 + "\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "name=T\xe910\n", "/gpu-0.nvml: line 7: an unknown key or a bad value"),
        (GOOD + "serial=" + "1" * 300 + "\n", "/gpu-0.nvml: line 7: a line too long"),
        (SYSTEM + "[mig]\n", "/gpu-0.nvml: line 3: [mig] before [gpu]"),
        (GOOD + "[gpu]\n", "/gpu-0.nvml: line 7: a second [gpu] in one file"),
        (GOOD + "[mig]\nname=x\nuuid=MIG-1\n", ": a [gpu] whose MIG keys and devices disagree"),
        (GOOD.replace("uuid=GPU-1\n", ""), ": a [gpu] without name, uuid or bus_id"),
    ],
)
def test_corrupt_description_fails_init_cleanly(
    nvml_library: Path, tmp_path: Path, text: str, why: str
) -> None:
    (tmp_path / "gpu-0.nvml").write_bytes(text.encode("latin-1"))
    seen, stderr = probe(nvml_library.parent, tmp_path)
    assert seen["init"] == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert (
        stderr.splitlines() == [f"fakeplugin NVML: no GPUs: description {tmp_path}{why}"] * 2
    )  # pynvml, torch


def test_files_that_disagree_fail_init_cleanly(nvml_library: Path, tmp_path: Path) -> None:
    (tmp_path / "gpu-0.nvml").write_text(GOOD, encoding="utf-8")
    (tmp_path / "gpu-1.nvml").write_text(GOOD.replace("580.95.05", "580.126.20"), encoding="utf-8")
    seen, stderr = probe(nvml_library.parent, tmp_path)
    assert seen["init"] == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert stderr.splitlines()[0] == (
        f"fakeplugin NVML: no GPUs: description {tmp_path}/gpu-1.nvml: versions other than the first file's"
    )


def test_the_good_minimal_description_is_good(nvml_library: Path, tmp_path: Path) -> None:
    """The base of the corrupt cases above is itself accepted."""
    (tmp_path / "gpu-0.nvml").write_text(GOOD, encoding="utf-8")
    seen, stderr = probe(nvml_library.parent, tmp_path)
    assert (seen["init"], seen["count"], stderr) == (0, 1, "")


# ---- the library's symbols and build ------------------------------------------------------------------


def test_exports_every_function_of_nvidias_header(nvml_library: Path) -> None:
    """A Go program on go-nvml dies on a symbol the library lacks: every function of the header
    (symbols.txt, hack/nvml-symbols.py) is exported, and nothing else."""
    assert shutil.which("nm"), "binutils' nm"
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(nvml_library)], capture_output=True, text=True, check=True
    ).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.split()[1] in "TW"}
    assert exported == set(build.symbols())
    assert len(exported) == 413  # NVIDIA/go-nvml v0.13.3-0 gen/nvml/nvml.h
    lib = ctypes.CDLL(str(nvml_library))  # dlsym, as cgo's lazy binding resolves them
    assert all(hasattr(lib, name) for name in build.symbols())
    both = ("nvmlInit", "nvmlInit_v2", "nvmlDeviceGetCount", "nvmlDeviceGetCount_v2", "nvmlDeviceGetPciInfo")
    assert set(both) <= build.defined()


def test_build_reuses_the_cached_library(nvml_library: Path) -> None:
    cache_root = nvml_library.parents[2]
    before = nvml_library.stat().st_mtime_ns
    assert build.build(cache_root) == nvml_library
    assert nvml_library.stat().st_mtime_ns == before
    assert nvml_library.parent.name == build.source_hash(build.compiler())


def test_build_error_names_the_compiler_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.COMPILER_ENV, "false")
    command = r"^false -shared -fPIC -O2 -Wall -Wextra -Werror .* failed \(exit 1\)"
    with pytest.raises(build.NvmlBuildError, match=command):
        build.build(tmp_path)
    monkeypatch.setenv(build.COMPILER_ENV, str(tmp_path / "no-cc"))
    with pytest.raises(build.NvmlBuildError, match=r"no-cc -shared .*No such file"):
        build.build(tmp_path)
    assert not list(tmp_path.glob("nvml/*/" + build.LIBRARY_NAME))


# ---- the description writer ---------------------------------------------------------------------------


def test_description_refuses_what_it_cannot_describe() -> None:
    devices, _ = published(inventory(DYNAMIC_MIG), "dyn-node", dynamic_mig=True)
    with pytest.raises(ValueError, match="gpu-0-mig-1g18gb-19-3: a DynamicMIG partition has no UUID"):
        nvmldata.render_device(devices["gpu-0-mig-1g18gb-19-3"])
