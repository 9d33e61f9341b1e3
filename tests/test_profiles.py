"""GPU profiles (fakeplugin.profiles): shipped data matches real hardware; the loader is strict."""

from __future__ import annotations

import math

import pytest

from fakeplugin.model import FabricReport
from fakeplugin.profiles import (
    ProfileError,
    UnknownProfileError,
    load_profile,
    parse_profile,
    profile_names,
)

MIB = 1024 * 1024
REQUIRED = {"t10", "rtx-a5000", "a100-40gb", "a100-80gb", "h100-80gb-hbm3", "h200", "t4", "a10", "l40s"}
BLACKWELL = {"b200", "gb200", "b300", "gb300", "rtx-pro-6000-blackwell-server"}
RUBIN = {"vr200"}


def test_every_required_profile_ships_and_loads() -> None:
    assert set(profile_names()) >= REQUIRED | BLACKWELL | RUBIN
    for name in profile_names():
        profile = load_profile(name)
        assert profile.name == name
        assert profile.source, f"{name}: no source cited"
        assert profile.memory_bytes(profile.ecc_default) is not None


@pytest.mark.parametrize(
    ("name", "product", "brand", "arch", "cc", "ecc_on_mib", "ecc_off_mib", "ecc_default", "device_id"),
    [
        ("rtx-a5000", "NVIDIA RTX A5000", "NvidiaRTX", "Ampere", "8.6", 23028, 24564, False, 0x2231),
        ("h200", "NVIDIA H200", "Nvidia", "Hopper", "9.0", 143771, None, True, 0x2335),
        ("t10", "NVIDIA T10", "Nvidia", "Turing", "7.5", 15360, None, True, 0x1E37),
        ("t4", "Tesla T4", "Nvidia", "Turing", "7.5", 15360, None, True, 0x1EB8),
        ("a10", "NVIDIA A10", "Nvidia", "Ampere", "8.6", 23028, None, True, 0x2236),
        ("l40s", "NVIDIA L40S", "Nvidia", "Ada Lovelace", "8.9", 46068, None, True, 0x26B9),
        ("a100-40gb", "NVIDIA A100-SXM4-40GB", "Nvidia", "Ampere", "8.0", 40960, None, True, 0x20B0),
        ("a100-80gb", "NVIDIA A100-SXM4-80GB", "Nvidia", "Ampere", "8.0", 81920, None, True, 0x20B2),
        ("h100-80gb-hbm3", "NVIDIA H100 80GB HBM3", "Nvidia", "Hopper", "9.0", 81559, None, True, 0x2330),
        ("b200", "NVIDIA B200", "Nvidia", "Blackwell", "10.0", 183359, None, True, 0x2901),
        ("gb200", "NVIDIA GB200", "Nvidia", "Blackwell", "10.0", 189471, None, True, 0x2941),
        ("b300", "NVIDIA B300 SXM6 AC", "Nvidia", "Blackwell", "10.3", 275040, None, True, 0x3182),
        ("gb300", "NVIDIA GB300", "Nvidia", "Blackwell", "10.3", 284208, None, True, 0x31C2),
        ("vr200", "NVIDIA Graphics Device", "Nvidia", "Rubin", "10.7", 286524, None, True, 0x307F),
        ("rtx-pro-6000-blackwell-server", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "Nvidia",
         "Blackwell", "12.0", 97887, None, True, 0x2BB5),
    ],
)  # fmt: skip
def test_profile_values(
    name: str,
    product: str,
    brand: str,
    arch: str,
    cc: str,
    ecc_on_mib: int,
    ecc_off_mib: int | None,
    ecc_default: bool,
    device_id: int,
) -> None:
    p = load_profile(name)
    assert (p.product_name, p.brand, p.architecture, p.cuda_compute_capability) == (product, brand, arch, cc)
    assert p.memory_ecc_on_bytes == ecc_on_mib * MIB
    assert p.memory_ecc_off_bytes == (ecc_off_mib * MIB if ecc_off_mib else None)
    assert p.ecc_default is ecc_default
    assert p.pci_device_id == device_id


def test_h200_matches_the_real_capture() -> None:
    p = load_profile("h200")
    assert p.memory_bytes(True) == 150754820096  # nvml.json mem_total_bytes
    assert p.addressing_mode == "None"
    assert p.smi.power_limit_watts == 700
    assert p.smi.pci_subsystem_id == 0x18BF
    assert p.mig is not None and p.mig.memory_slices == 8
    rows = [
        (m.name, m.gi_profile_id, m.slices, m.instances, m.memory_mib, m.multiprocessors, m.copy_engines,
         m.decoders, m.encoders, m.jpeg_engines, m.ofa_engines, m.placement_starts, m.placement_size)
        for m in p.mig.profiles
    ]  # fmt: skip
    assert rows == [
        ("1g.18gb", 19, 1, 7, 16384, 16, 1, 1, 0, 1, 0, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.18gb+me", 20, 1, 1, 16384, 16, 1, 1, 0, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.35gb", 15, 1, 4, 33280, 26, 1, 1, 0, 1, 0, (0, 2, 4, 6), 2),
        ("2g.35gb", 14, 2, 3, 33280, 32, 2, 2, 0, 2, 0, (0, 2, 4), 2),
        ("3g.71gb", 9, 3, 2, 71424, 60, 3, 3, 0, 3, 0, (0, 4), 4),
        ("4g.71gb", 5, 4, 1, 71424, 64, 4, 4, 0, 4, 0, (0,), 4),
        ("7g.141gb", 0, 7, 1, 143360, 132, 8, 7, 0, 7, 1, (0,), 8),
    ]


@pytest.mark.parametrize(
    ("name", "addressing", "power", "reserved", "bar1", "subsystem", "nvlinks"),
    [
        # `nvidia-smi -q -x` of real nodes (NVIDIA/k8s-test-infra testdata/hardware): B200 580.105.08,
        # GB200 (p6e-gb200) and GB300 580.173.02; Grace-Blackwell addresses host memory through ATS.
        ("b200", "None", 1000, 728, 262144, 0x1999, 18),
        ("gb200", "ATS", 1200, 742, 262144, 0x2046, 18),
        ("gb300", "ATS", 1400, 947, 524288, 0x21F1, 18),
        # Rubin, pre-release (qx-vrnvl72, driver 615.23); its 18 NVLinks are the mock's assumption [U].
        ("vr200", "ATS", 2300, 1277, 524288, 0x221A, 18),
        # nvidia-smi summaries and the open-gpu-kernel-modules README only: no -q, so less is known.
        ("b300", None, 1100, None, None, 0x20E6, 18),
        # The DRA driver's slice (HMM), summaries and a vGPU host's -q (BAR1); a PCIe card without NVLink.
        ("rtx-pro-6000-blackwell-server", "HMM", 600, None, 131072, None, 0),
    ],
)
def test_blackwell_boards_match_their_captures(
    name: str,
    addressing: str | None,
    power: int,
    reserved: int | None,
    bar1: int | None,
    subsystem: int | None,
    nvlinks: int,
) -> None:
    p = load_profile(name)
    assert p.addressing_mode == addressing
    s = p.smi
    assert (s.power_limit_watts, s.reserved_memory_mib, s.bar1_memory_mib) == (power, reserved, bar1)
    assert (s.pci_subsystem_id, s.nvlinks) == (subsystem, nvlinks)
    assert "Not verified [U]" in p.notes, f"{name}: the notes must say what is not verified"


def _mig_rows(name: str) -> list[tuple[str | int | tuple[int, ...] | None, ...]]:
    mig = load_profile(name).mig
    assert mig is not None
    return [
        (m.name, m.gi_profile_id, m.slices, m.instances, m.memory_mib, m.multiprocessors, m.copy_engines,
         m.decoders, m.encoders, m.jpeg_engines, m.ofa_engines, m.placement_starts, m.placement_size)
        for m in mig.profiles
    ]  # fmt: skip


def test_b200_mig_matches_the_drivers_slices() -> None:
    # karpenter-provider-aws' transcript of a p6-b200's DynamicMIG slices; -lgip of mig-parted#187.
    assert load_profile("b200").mig.memory_slices == 8  # type: ignore[union-attr]
    assert _mig_rows("b200") == [
        ("1g.23gb", 19, 1, 7, 20992, 18, 2, 1, 0, 1, 0, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.23gb+me", 20, 1, 1, 20992, 18, 2, 1, 0, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
        ("1g.45gb", 15, 1, 4, 45312, 30, 2, 1, 0, 1, 0, (0, 2, 4, 6), 2),
        ("2g.45gb", 14, 2, 3, 45312, 36, 4, 2, 0, 2, 0, (0, 2, 4), 2),
        ("3g.90gb", 9, 3, 2, 91136, 70, 6, 3, 0, 3, 0, (0, 4), 4),
        ("4g.90gb", 5, 4, 1, 91136, 72, 8, 4, 0, 4, 0, (0,), 4),
        ("7g.180gb", 0, 7, 1, 182784, 148, 16, 7, 0, 7, 1, (0,), 8),
    ]


def test_rtx_pro_6000_mig_matches_the_lgip_capture() -> None:
    # `nvidia-smi mig -lgip` / `-lgipp` of a Server Edition on 610.43.02: 12 placement units, 4 compute
    # slices, +me / +gfx / +me.all / -me variants with their own ids.
    assert load_profile("rtx-pro-6000-blackwell-server").mig.memory_slices == 12  # type: ignore[union-attr]
    one, two, four = (0, 3, 6, 9), (0, 6), (0,)
    assert _mig_rows("rtx-pro-6000-blackwell-server") == [
        ("1g.24gb", 14, 1, 4, 24192, 46, 1, 1, 1, 1, 0, one, 3),
        ("1g.24gb+me", 21, 1, 1, 24192, 46, 1, 1, 1, 1, 1, one, 3),
        ("1g.24gb+gfx", 47, 1, 4, 24192, 46, 1, 1, 1, 1, 0, one, 3),
        ("1g.24gb+me.all", 65, 1, 1, 24192, 46, 1, 4, 4, 4, 1, one, 3),
        ("1g.24gb-me", 67, 1, 4, 24192, 46, 1, 0, 0, 0, 0, one, 3),
        ("2g.48gb", 5, 2, 2, 48512, 94, 2, 2, 2, 2, 0, two, 6),
        ("2g.48gb+gfx", 35, 2, 2, 48512, 94, 2, 2, 2, 2, 0, two, 6),
        ("2g.48gb+me.all", 64, 2, 1, 48512, 94, 2, 4, 4, 4, 1, two, 6),
        ("2g.48gb-me", 66, 2, 2, 48512, 94, 2, 0, 0, 0, 0, two, 6),
        ("4g.96gb", 0, 4, 1, 97408, 188, 4, 4, 4, 4, 1, four, 12),
        ("4g.96gb+gfx", 32, 4, 1, 97408, 188, 4, 4, 4, 4, 1, four, 12),
    ]


@pytest.mark.parametrize(
    ("name", "unknown"),
    [
        ("b200", []),
        ("rtx-pro-6000-blackwell-server", []),
        # -lgip of a GB200 (mig-parted#227) was readable for its first four profiles only.
        ("gb200", ["3g.93gb", "4g.93gb", "7g.186gb"]),
        # No real -lgip of a B300 or GB300 found: names and instance counts come from NVIDIA's mig-parted.
        ("b300", ["1g.34gb", "1g.34gb+me", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb"]),
        ("gb300", ["1g.35gb", "1g.35gb+me", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb"]),
    ],
)
def test_blackwell_mig_memory_is_known_only_where_captured(name: str, unknown: list[str]) -> None:
    mig = load_profile(name).mig
    assert mig is not None
    assert [m.name for m in mig.profiles if m.memory_mib is None] == unknown


def _go_nvlib_profile_name(slices: int, memory_mib: int, total_bytes: int, gi_id: int) -> str:
    # go-nvlib mig_profile.go: GB = round(ceil(mem/total*8)/8 * ceil(total/GiB)); +me for GI 20.
    fraction = math.ceil(memory_mib * MIB / total_bytes * 8) / 8
    gb = math.floor(fraction * math.ceil(total_bytes / (1024 * MIB)) + 0.5)  # Go math.Round: half away
    return f"{slices}g.{gb}gb" + ("+me" if gi_id == 20 else "")


@pytest.mark.parametrize("name", ["h200", "a100-40gb", "a100-80gb", "h100-80gb-hbm3"])
def test_mig_profile_names_follow_from_their_memory(name: str) -> None:
    p = load_profile(name)
    assert p.mig is not None
    total = p.memory_bytes(p.ecc_default)
    assert total is not None
    for m in p.mig.profiles:
        assert m.memory_mib is not None
        assert m.name == _go_nvlib_profile_name(m.slices, m.memory_mib, total, m.gi_profile_id)


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        # -lgip on an A100 80GB PCIe, driver 515.86.01 (9.50/19.50/39.25/79.00 GiB); GI 15 from later drivers.
        ("a100-80gb", [
            ("1g.10gb", 19, 9728, 14, 1, 0, 0, 0), ("1g.10gb+me", 20, 9728, 14, 1, 1, 1, 1),
            ("1g.20gb", 15, 19968, 14, 1, 1, 0, 0), ("2g.20gb", 14, 19968, 28, 2, 1, 0, 0),
            ("3g.40gb", 9, 40192, 42, 3, 2, 0, 0), ("4g.40gb", 5, 40192, 56, 4, 2, 0, 0),
            ("7g.80gb", 0, 80896, 98, 7, 5, 1, 1),
        ]),
        # The DRA driver's DynamicMIG slices of a p5.48xlarge (karpenter-provider-aws nvidiadra).
        ("h100-80gb-hbm3", [
            ("1g.10gb", 19, 9984, 16, 1, 1, 1, 0), ("1g.10gb+me", 20, 9984, 16, 1, 1, 1, 1),
            ("1g.20gb", 15, 20096, 26, 1, 1, 1, 0), ("2g.20gb", 14, 20096, 32, 2, 2, 2, 0),
            ("3g.40gb", 9, 40448, 60, 3, 3, 3, 0), ("4g.40gb", 5, 40448, 64, 4, 4, 4, 0),
            ("7g.80gb", 0, 81152, 132, 8, 7, 7, 1),
        ]),
    ],
)  # fmt: skip
def test_80gb_mig_profiles_match_their_sources(name: str, rows: list[tuple[str | int, ...]]) -> None:
    p = load_profile(name)
    assert p.mig is not None and p.mig.memory_slices == 8
    assert [
        (m.name, m.gi_profile_id, m.memory_mib, m.multiprocessors, m.copy_engines, m.decoders, m.jpeg_engines,
         m.ofa_engines)
        for m in p.mig.profiles
    ] == rows  # fmt: skip
    assert {m.encoders for m in p.mig.profiles} == {0}
    # Placements are the 8-slice layout every 7-slice GPU shares (H200 capture, -lgipp transcripts).
    h200 = load_profile("h200").mig
    assert h200 is not None
    assert [(m.placement_starts, m.placement_size) for m in p.mig.profiles] == [
        (m.placement_starts, m.placement_size) for m in h200.profiles
    ]


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(UnknownProfileError) as exc:
        load_profile("h300")
    assert str(exc.value) == f'unknown GPU profile "h300" (known: {", ".join(profile_names())})'


GOOD = {
    "source": "test",
    "productName": "NVIDIA Test",
    "brand": "Nvidia",
    "architecture": "Hopper",
    "cudaComputeCapability": "9.0",
    "pciDeviceId": "0x2335",
    "memory": {"eccOn": 1024 * MIB},
    "eccDefault": True,
}


def test_parse_profile_minimal() -> None:
    p = parse_profile("x", GOOD, "x.yaml")
    assert (p.memory_bytes(True), p.memory_bytes(False), p.mig, p.addressing_mode) == (
        1024 * MIB,
        None,
        None,
        None,
    )


def test_mig_memory_may_be_left_out_where_unknown() -> None:
    mig = {"name": "1g.10gb", "giProfileId": 19, "slices": 1, "instances": 7, "multiprocessors": 16,
           "copyEngines": 1, "decoders": 1, "encoders": 0, "jpegEngines": 1, "ofaEngines": 0,
           "placements": [0, 1, 2, 3, 4, 5, 6], "placementSize": 1}  # fmt: skip
    p = parse_profile("x", {**GOOD, "mig": {"memorySlices": 8, "profiles": [mig]}}, "x.yaml")
    assert p.mig is not None and [m.memory_mib for m in p.mig.profiles] == [None]
    assert load_profile("t4").mig is None


def test_parse_profile_reports_every_problem() -> None:
    bad = {
        **GOOD,
        "brand": "NVIDIA",
        "cudaComputeCapability": 9.0,
        "pciDeviceId": "0x233510de",
        "eccDefault": False,
        "memroy": 1,
        "mig": {"memorySlices": 8, "profiles": [{"name": "1g", "giProfileId": 19}]},
    }
    with pytest.raises(ProfileError) as exc:
        parse_profile("x", bad, "x.yaml")
    assert exc.value.problems == [
        'x.yaml: memroy: unknown field (did you mean "memory"?)',
        "x.yaml: brand: must be one of Unknown, Quadro, Tesla, NVS, Grid, GeForce, Titan, NvidiaVApps, "
        "NvidiaVPC, NvidiaVCS, NvidiaVWS, NvidiaCloudGaming, QuadroRTX, NvidiaRTX, Nvidia, GeForceRTX, "
        'TitanRTX; got "NVIDIA"',
        "x.yaml: cudaComputeCapability: must be a string, got number 9.0 (quote it in YAML)",
        'x.yaml: pciDeviceId: must be 4 lower-case hex digits like "0x2231", got "0x233510de"',
        "x.yaml: memory.eccOff: required for the default ECC mode",
        *[
            f"x.yaml: mig.profiles[0].{key}: required field is missing"
            for key in (
                "placements",
                "slices",
                "instances",
                "multiprocessors",
                "copyEngines",
                "decoders",
                "encoders",
                "jpegEngines",
                "ofaEngines",
                "placementSize",
            )
        ],
    ]


def test_nvlinks_are_at_most_18() -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile("x", {**GOOD, "smi": {"nvlinks": 19}}, "x.yaml")
    assert exc.value.problems == [
        "x.yaml: smi.nvlinks: must be at most 18 (NVLink 4 and 5, Hopper and Blackwell: 18 per GPU), got 19"
    ]
    assert parse_profile("x", {**GOOD, "smi": {"nvlinks": 18}}, "x.yaml").smi.nvlinks == 18


# `nvidia-smi -q` Fabric section outside a multi-node NVLink domain: [C] where a real `-q`/`-q -x` of the
# model shows it (the H200 capture; NVIDIA/k8s-test-infra testdata/hardware: qx-h100, qx-b200, qx-gb200,
# qx-gb300, qx-vrnvl72, qx-a100, qx-t4, qx-l40s; an A10's -q in leptonai/gpud's test data), the rest marked
# [U] in their files.
REGISTERED = {"h100-80gb-hbm3", "h200", "b200", "gb200", "b300", "gb300", "vr200"}


@pytest.mark.parametrize("name", profile_names())
def test_every_profile_says_what_its_fabric_info_reports(name: str) -> None:
    report = load_profile(name).smi.fabric
    assert report is not None
    assert report.registered is (name in REGISTERED)


def test_fabric_health_rows_are_the_captured_ones() -> None:
    assert load_profile("h200").smi.fabric == FabricReport(registered=True)
    b200 = load_profile("b200").smi.fabric
    assert b200 is not None and dict(b200.health) == {
        "summary": "Healthy",
        "access_timeout_recovery": "False",
    }
    gb300 = load_profile("gb300").smi.fabric
    assert gb300 is not None and dict(gb300.health)["incorrect_configuration"] == "None"
    vr200 = load_profile("vr200").smi.fabric
    assert vr200 is not None and dict(vr200.health)["partition_assigned"] == "True"


def test_vr200_is_not_mig_capable_until_a_mig_profile_is_known() -> None:
    p = load_profile("vr200")
    assert p.mig is None and "MIG" in p.notes and "pre-release" in p.notes


def test_fabric_problems_are_reported() -> None:
    bad = {"state": "N/A", "health": {"summary": "Healthy", "speed": "Full"}}
    with pytest.raises(ProfileError) as exc:
        parse_profile("x", {**GOOD, "smi": {"fabric": bad}}, "x.yaml")
    assert exc.value.problems == [
        "x.yaml: smi.fabric.health.speed: unknown row (known: summary, bandwidth, routeRecoveryInProgress, "
        "routeUnhealthy, accessTimeoutRecovery, incorrectConfiguration, partitionAssigned)",
        "x.yaml: smi.fabric.health: a GPU whose fabric state is N/A reports every health row N/A",
    ]
    with pytest.raises(ProfileError) as exc:
        parse_profile("x", {**GOOD, "smi": {"fabric": {"state": "In Progress"}}}, "x.yaml")
    assert exc.value.problems == [
        'x.yaml: smi.fabric.state: must be one of Completed, N/A; got "In Progress"'
    ]
    assert parse_profile("x", GOOD, "x.yaml").smi.fabric is None  # unknown: no Fabric section


def test_gpu_numa_nodes_are_at_most_16() -> None:
    with pytest.raises(ProfileError) as exc:
        parse_profile("x", {**GOOD, "smi": {"gpuNumaNodes": 17}}, "x.yaml")
    assert exc.value.problems == [
        "x.yaml: smi.gpuNumaNodes: must be at most 16 (Grace-Blackwell: 8 per GPU), got 17"
    ]
    assert (load_profile("gb200").smi.gpu_numa_nodes, load_profile("b200").smi.gpu_numa_nodes) == (8, 0)
