"""The CDI edits that put the mock NVML library and its description into containers (cdispec.claim_spec
with `nvml_library`, nvmldata's mounts): the library at spec level where a container finds it by name, each
device's description file at device level, so a container that got some of a claim's requests lists
exactly their devices. The container views are made from the real spec as tests/harness/nvidia_smi's
are (every mount of the injected devices copied to its container path under a root), then read by pynvml.
One source of truth: the container's fake nvidia-smi prints what its NVML answers, for every profile.
"""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, nvmldata, smi
from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from fakeplugin.profiles import load_profile, profile_names
from tests.harness import DRIVER
from tests.harness.nvidia_smi import container_view, smi_lines
from tests.harness.nvml import probe
from tests.harness.paths import SEED_LAB
from tests.harness.smi_shells import SmiShell

MIB = 1024 * 1024
UID = "5b0d8c1e-0000-4000-8000-00000000c1a1"
OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
STATIC_MIG = """
driverVersion: "580.95.05"
cudaDriverVersion: "13.0"
nodes:
- name: mig-node
  gpus:
  - profile: a100-40gb
    mig:
    - {profile: 3g.20gb}
    - {profile: 1g.5gb, count: 2}
"""


def devices_of(text: str, node: str) -> dict[str, GpuDevice]:
    return {d.name: d for d in node_devices(parse_inventory(yaml.safe_load(text), "inv.yaml"), node, {})}


def prepared(tmp_path: Path, library: Path, devices: list[GpuDevice]) -> Path:
    """The claim's files as Prepare will leave them: the description files and the CDI spec."""
    plugin = tmp_path / "plugin"
    nvmldata.write_claim_data(plugin, UID, devices)
    smi.install_program(plugin)
    smi.install_script(plugin)
    smi.write_claim_data(plugin, UID, devices)
    spec = cdispec.claim_spec(UID, devices, driver_name=DRIVER, plugin_dir=plugin, nvml_library=library)
    assert cdi.validate_spec(spec) == []
    path = cdi.spec_path(tmp_path / "cdi", UID, driver_name=DRIVER)
    path.parent.mkdir(parents=True, exist_ok=True)
    cdi.write_spec(path, spec)
    return path


def in_container(nvml_library: Path, root: Path) -> dict[str, Any]:
    """pynvml in a container under `root`: the library found where the spec mounts it (as the dynamic
    loader would search that directory), the description at its container path."""
    library = root / nvmldata.library_container_paths()[0].lstrip("/")
    assert library.read_bytes() == nvml_library.read_bytes()
    seen, stderr = probe(library.parent, root / nvmldata.DESCRIPTION_CONTAINER_DIR.lstrip("/"))
    assert stderr == ""
    return seen


def test_spec_mounts_the_library_and_each_devices_description(nvml_library: Path) -> None:
    devices = devices_of(SEED_LAB.read_text(encoding="utf-8"), "capi-dralabs-md-gput10-gzl84-f2m2d")
    plugin = Path("/var/lib/kubelet/plugins/gpu.nvidia.com")
    spec = cdispec.claim_spec(
        UID, list(devices.values()), driver_name=DRIVER, plugin_dir=plugin, nvml_library=nvml_library
    )
    assert cdi.validate_spec(spec) == []
    arch = platform.machine()
    library_mounts = spec["containerEdits"]["mounts"][len(smi.spec_mounts(plugin)) :]
    assert library_mounts == [
        {"hostPath": str(nvml_library), "containerPath": path, "options": OPTIONS}
        for path in (f"/usr/lib/{arch}-linux-gnu/libnvidia-ml.so.1", "/usr/lib64/libnvidia-ml.so.1")
    ]
    for entry, name in zip(spec["devices"], ["gpu-0", "gpu-1"], strict=True):
        assert entry["containerEdits"]["mounts"][-2:] == [
            {
                "hostPath": f"{plugin}/nvml/{UID}-{name}.nvml",
                "containerPath": f"/run/fakeplugin/nvml/{name}.nvml",
                "options": OPTIONS,
            },
            {  # its live state's directory (telemetry.nvmllive), beside it
                "hostPath": f"{plugin}/nvml/live/{name}",
                "containerPath": f"/run/fakeplugin/nvml/{name}.live",
                "options": OPTIONS,
            },
        ]
    without = cdispec.claim_spec(UID, list(devices.values()), driver_name=DRIVER, plugin_dir=plugin)
    assert not any("nvml" in m["containerPath"] for m in without["containerEdits"]["mounts"])


def test_the_library_needs_the_plugin_dir(nvml_library: Path) -> None:
    devices = devices_of(SEED_LAB.read_text(encoding="utf-8"), "capi-dralabs-md-gput10-gzl84-f2m2d")
    with pytest.raises(ValueError, match="descriptions need the plugin directory"):
        cdispec.claim_spec(UID, [devices["gpu-0"]], driver_name=DRIVER, nvml_library=nvml_library)


def test_library_container_paths_follow_the_machine() -> None:
    assert nvmldata.library_container_paths("aarch64") == (
        "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib64/libnvidia-ml.so.1",
    )


def test_each_container_lists_its_own_requests_devices(nvml_library: Path, tmp_path: Path) -> None:
    """One claim, two requests of one GPU each, in two containers (NVIDIA's quickstart gpu-test4 shape)."""
    devices = devices_of(SEED_LAB.read_text(encoding="utf-8"), "capi-dralabs-md-gput10-gzl84-f2m2d")
    spec = prepared(tmp_path, nvml_library, [devices["gpu-0"], devices["gpu-1"]])
    for name in ("gpu-0", "gpu-1"):
        seen = in_container(nvml_library, container_view(tmp_path / name, [(spec, [name])]))
        assert seen["count"] == 1
        assert [g["uuid"] for g in seen["gpus"]] == [devices[name].uuid]
        assert seen["gpus"][0]["minor"] == devices[name].minor
    both = in_container(nvml_library, container_view(tmp_path / "both", [(spec, ["gpu-1", "gpu-0"])]))
    assert [g["uuid"] for g in both["gpus"]] == [devices["gpu-0"].uuid, devices["gpu-1"].uuid]


def test_mig_devices_of_one_gpu_in_one_container(nvml_library: Path, tmp_path: Path) -> None:
    devices = devices_of(STATIC_MIG, "mig-node")
    names = ["gpu-0-mig-1g5gb-19-5", "gpu-0-mig-3g20gb-9-0", "gpu-0-mig-1g5gb-19-4"]
    spec = prepared(tmp_path, nvml_library, [devices[n] for n in names])
    seen = in_container(nvml_library, container_view(tmp_path / "ctr", [(spec, names[:2])]))
    assert seen["count"] == 1
    [gpu] = seen["gpus"]
    assert gpu["uuid"] == devices[names[0]].parent_uuid
    found = [m["uuid"] for m in gpu["migs"] if "error" not in m]
    assert found == [devices["gpu-0-mig-3g20gb-9-0"].uuid, devices["gpu-0-mig-1g5gb-19-5"].uuid]


# ---- one source of truth: the container's nvidia-smi prints what its NVML answers -------------------------

# What nvidia-smi reports and NVML answers alike, as `--query-gpu` fields.
FIELDS = (
    "index,name,uuid,serial,pci.bus_id,pci.device_id,pci.sub_device_id,memory.total,memory.reserved,"
    "compute_cap,driver_version,temperature.gpu,power.limit,power.draw,mig.mode.current"
)


def mig_profile(profile: str) -> str | None:
    """The first MIG profile of `profile` whose devices can be published (its memory size known)."""
    capability = load_profile(profile).mig
    known = [p.name for p in capability.profiles if p.memory_mib is not None] if capability else []
    return known[0] if known else None


def every_profile(*, mig_layouts: bool) -> list[GpuDevice]:
    """A node with one GPU of each shipped profile; with `mig_layouts`, each GPU that can have MIG devices
    in MIG mode with one of them (`mig_profile`; a static layout)."""
    gpus: list[dict[str, Any]] = []
    for name in profile_names():
        gpus.append({"profile": name})
        if mig_layouts and (profile := mig_profile(name)) is not None:
            gpus[-1]["mig"] = [{"profile": profile}]
    inventory = {
        "driverVersion": "580.95.05",
        "cudaDriverVersion": "13.0",
        "nodes": [{"name": "n", "gpus": gpus}],
    }
    return node_devices(parse_inventory(inventory, "inv.yaml"), "n", {})


def both_views(
    nvml_library: Path, tmp_path: Path, smi_shell: SmiShell, devices: list[GpuDevice], *smi_args: str
) -> tuple[dict[str, Any], list[str]]:
    """What pynvml sees and what nvidia-smi `smi_args` prints in one container that got `devices`."""
    spec = prepared(tmp_path, nvml_library, devices)
    root = container_view(tmp_path / "ctr", [(spec, [d.name for d in devices])])
    return in_container(nvml_library, root), smi_lines(smi_shell, root, *smi_args)


def watts(milliwatts: Any) -> str:
    return "[N/A]" if isinstance(milliwatts, dict) else f"{milliwatts / 1000:.2f}"


def test_nvidia_smi_prints_what_nvml_answers_for_every_profile(
    nvml_library: Path, tmp_path: Path, smi_shell: SmiShell
) -> None:
    gpus = every_profile(mig_layouts=False)
    assert len(gpus) == len(profile_names())
    seen, lines = both_views(
        nvml_library, tmp_path, smi_shell, gpus, f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"
    )
    assert seen["count"] == len(lines) == len(gpus)
    mig_modes = {pynvml.NVML_DEVICE_MIG_DISABLE: "Disabled", pynvml.NVML_DEVICE_MIG_ENABLE: "Enabled"}
    for gpu, line in zip(seen["gpus"], lines, strict=True):
        pci = gpu["pci"]
        answered = [
            str(gpu["index"]),
            gpu["name"],
            gpu["uuid"],
            gpu["serial"],
            pci["busId"],
            f"0x{pci['pciDeviceId']:08X}",
            f"0x{pci['pciSubSystemId']:08X}" if pci["pciSubSystemId"] else "[N/A]",
            str(gpu["memory"]["v2"]["total"] // MIB),
            str(gpu["memory"]["v2"]["reserved"] // MIB),
            f"{gpu['cc'][0]}.{gpu['cc'][1]}",
            seen["driver_version"],
            str(gpu["temperature"]),
            watts(gpu["power_limit"]),
            watts(gpu["power_usage"]),
            "[N/A]" if "error" in gpu["mig_mode"] else mig_modes[gpu["mig_mode"][0]],
        ]
        assert line.split(", ") == answered, gpu["name"]


def test_nvidia_smi_lists_the_mig_devices_nvml_answers_for_every_mig_profile(
    nvml_library: Path, tmp_path: Path, smi_shell: SmiShell
) -> None:
    """A container given the MIG device of each GPU that can have one (and nothing of the others)."""
    migs = [d for d in every_profile(mig_layouts=True) if d.mig is not None]
    assert len(migs) == sum(mig_profile(p) is not None for p in profile_names()) > 0
    seen, lines = both_views(nvml_library, tmp_path, smi_shell, migs, "-L")
    listed = []
    for gpu in seen["gpus"]:
        listed.append(f"GPU {gpu['index']}: {gpu['name']} (UUID: {gpu['uuid']})")
        for n, device in enumerate(m for m in gpu["migs"] if "error" not in m):
            profile = device["name"].removeprefix(f"{gpu['name']} MIG ")
            listed.append(f"  MIG {profile:<12}Device {n:>2}: (UUID: {device['uuid']})")
    assert lines == listed
    assert len(lines) == 2 * len(migs)
