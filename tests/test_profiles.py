"""GPU profiles (fakeplugin.profiles): shipped data matches real hardware; the loader is strict."""

from __future__ import annotations

import math

import pytest

from fakeplugin.profiles import (
    ProfileError,
    UnknownProfileError,
    load_profile,
    parse_profile,
    profile_names,
)

MIB = 1024 * 1024
REQUIRED = {"t10", "rtx-a5000", "a100-40gb", "a100-80gb", "h100-80gb-hbm3", "h200", "t4", "a10", "l40s"}


def test_every_required_profile_ships_and_loads() -> None:
    assert set(profile_names()) >= REQUIRED
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
    ],
)
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


def _go_nvlib_profile_name(slices: int, memory_mib: int, total_bytes: int, gi_id: int) -> str:
    # go-nvlib mig_profile.go: GB = round(ceil(mem/total*8)/8 * ceil(total/GiB)); +me for GI 20.
    fraction = math.ceil(memory_mib * MIB / total_bytes * 8) / 8
    gb = math.floor(fraction * math.ceil(total_bytes / (1024 * MIB)) + 0.5)  # Go math.Round: half away
    return f"{slices}g.{gb}gb" + ("+me" if gi_id == 20 else "")


@pytest.mark.parametrize("name", ["h200", "a100-40gb"])
def test_mig_profile_names_follow_from_their_memory(name: str) -> None:
    p = load_profile(name)
    assert p.mig is not None
    total = p.memory_bytes(p.ecc_default)
    assert total is not None
    for m in p.mig.profiles:
        assert m.memory_mib is not None
        assert m.name == _go_nvlib_profile_name(m.slices, m.memory_mib, total, m.gi_profile_id)


def test_mig_memory_left_out_where_unknown() -> None:
    for name in ("a100-80gb", "h100-80gb-hbm3"):
        p = load_profile(name)
        assert p.mig is not None and [m.memory_mib for m in p.mig.profiles] == [None] * 7
        assert "unknown" in p.notes
    assert load_profile("t4").mig is None


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
