"""MIG: static layouts and DynamicMIG partitions (publish: mig, inventory, devices, slices), their CDI
specs and Prepare over real files. Expected values are the real driver's
(kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0 cmd/gpu-kubelet-plugin/mig.go, deviceinfo.go)."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import cdi, releases
from fakeplugin.drivers.gpu.prepare import cdispec
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.drivers.gpu.publish.devices import gpu_uuid
from fakeplugin.drivers.gpu.publish.node import NodeDevices
from fakeplugin.drivers.gpu.publish.slices import partitionable_layout, resource_slices
from fakeplugin.inventory import InventoryError, load_inventory
from fakeplugin.mig import camel_to_dns_name, canonical_name, mig_uuid, place
from fakeplugin.model import ClaimRef
from fakeplugin.profiles import load_profile, profile_names
from fakeplugin.render import render_documents
from fakeplugin.resourceslices import MAX_DEVICES_RESTRICTED
from fakeplugin.runtime.driver import Claim
from tests.harness.golden import check_golden
from tests.harness.inventory import devices, inventory

ROOT = Path(__file__).resolve().parent.parent
MIG_EXAMPLE = ROOT / "examples" / "mig.yaml"
MIB = 1024 * 1024
MIG_UUID = re.compile(r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
CANONICAL = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # the driver's canonicalMigNameRegex
PARENT_KEYS = {
    "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion",
    "resource.kubernetes.io/pciBusID", "resource.kubernetes.io/pcieRoot", "addressingMode",
}  # fmt: skip
CAPACITY_KEYS = [
    "multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines", "memory",
]  # fmt: skip
COUNTER_KEYS = [
    "multiprocessors", "copy-engines", "decoders", "encoders", "jpeg-engines", "ofa-engines", "memory",
]  # fmt: skip


def slices(
    *gpus: dict[str, Any], dynamic: bool = False, server: tuple[int, int] = (1, 35)
) -> list[dict[str, Any]]:
    return resource_slices(
        devices(*gpus, dynamic=dynamic),
        driver="gpu.nvidia.com",
        node_name="n",
        node_uid="u",
        server_version=server,
    )


def problems(*gpus: dict[str, Any]) -> list[str]:
    with pytest.raises(InventoryError) as exc:
        inventory(*gpus)
    return exc.value.problems


def api_devices(rendered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in rendered for d in s["spec"].get("devices", [])]


# ---- names ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("minor", "profile", "gi", "start", "name"),
    [
        (0, "1g.5gb", 19, 0, "gpu-0-mig-1g5gb-19-0"),
        (0, "1g.18gb+me", 20, 3, "gpu-0-mig-1g18gb-me-20-3"),
        (1, "7g.141gb", 0, 0, "gpu-1-mig-7g141gb-0-0"),
        (3, "2c.7g.80gb", 0, 0, "gpu-3-mig-2c7g80gb-0-0"),
    ],
)
def test_canonical_names(minor: int, profile: str, gi: int, start: int, name: str) -> None:
    assert canonical_name(minor, profile, gi, start) == name
    parsed = CANONICAL.match(name)
    assert parsed is not None and parsed.group(1, 3, 4) == (str(minor), str(gi), str(start))


@pytest.mark.parametrize(
    ("capacity", "counter"),
    [("multiprocessors", "multiprocessors"), ("copyEngines", "copy-engines"), ("jpegEngines", "jpeg-engines"),
     ("ofaEngines", "ofa-engines"), ("memory", "memory"), ("HTTPServer", "http-server"),
     ("memorySlice0", "memory-slice0")],
)  # fmt: skip
def test_counter_names_are_camel_to_dns_name(capacity: str, counter: str) -> None:
    assert camel_to_dns_name(capacity) == counter


@pytest.mark.parametrize("name", [p for p in profile_names() if load_profile(p).mig is not None])
def test_profile_mig_data_is_consistent(name: str) -> None:
    """Names follow go-nvlib's formula where memory is known; placements lie within the memory slices."""
    profile = load_profile(name)
    assert profile.mig is not None
    total = profile.memory_bytes(profile.ecc_default)
    assert total is not None
    for p in profile.mig.profiles:
        assert max(p.placement_starts) + p.placement_size <= profile.mig.memory_slices, p.name
        if p.memory_mib is not None:
            eighths = math.ceil(p.memory_mib * MIB / total * 8)
            gb = math.floor(eighths / 8 * math.ceil(total / 2**30) + 0.5)  # Go's math.Round
            # go-nvlib's MigProfileInfo.String: +attributes (me, me.all, gfx) or -negated ones (me).
            assert re.sub(r"[+-].*", "", p.name) == f"{p.slices}g.{gb}gb"
    assert max(p.placement_size for p in profile.mig.profiles) == profile.mig.memory_slices


def test_place_fills_larger_first_and_backtracks() -> None:
    h200 = {p.name: p for p in load_profile("h200").mig.profiles}  # type: ignore[union-attr]

    def spec(name: str) -> tuple[tuple[int, ...], int]:
        return h200[name].placement_starts, h200[name].placement_size

    assert place([spec("3g.71gb"), spec("4g.71gb")]) == [4, 0]
    assert place([spec("1g.35gb")] * 4) == [0, 2, 4, 6]
    # 2g at 0 would leave no room for a 3g and another 2g: the solver moves on.
    assert place([spec("2g.35gb"), spec("3g.71gb"), spec("2g.35gb")]) == [0, 4, 2]
    assert place([spec("3g.71gb")] * 3) is None
    assert place([spec("1g.18gb")], taken=frozenset(range(7))) is None


# ---- static MIG -------------------------------------------------------------------------------------


def test_a100_seven_1g5gb_replace_the_full_gpu() -> None:
    devs = devices({"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]})
    assert [d.name for d in devs] == [f"gpu-0-mig-1g5gb-19-{i}" for i in range(7)]
    parent = gpu_uuid("n", 0)
    assert {d.parent_uuid for d in devs} == {parent}
    assert all(MIG_UUID.match(d.uuid) for d in devs) and len({d.uuid for d in devs}) == 7
    assert devs[3].uuid == mig_uuid(parent, 19, 3)
    (rs,) = slices({"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]})
    dev = rs["spec"]["devices"][3]
    assert set(dev["attributes"]) == {"type", "uuid", "parentUUID", "profile"} | PARENT_KEYS - {
        "addressingMode"
    }
    assert dev["attributes"]["type"] == {"string": "mig"}
    assert dev["attributes"]["profile"] == {"string": "1g.5gb"}
    assert dev["attributes"]["parentUUID"] == {"string": parent}
    assert dev["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-40GB"}
    assert dev["capacity"] == {
        "multiprocessors": {"value": "14"}, "copyEngines": {"value": "1"}, "decoders": {"value": "0"},
        "encoders": {"value": "0"}, "jpegEngines": {"value": "0"}, "ofaEngines": {"value": "0"},
        "memory": {"value": "4864Mi"}, "memorySlice3": {"value": "1"},
    }  # fmt: skip
    assert "consumesCounters" not in dev


def test_h200_static_capacity_matches_the_capture() -> None:
    (dev,) = api_devices(slices({"profile": "h200", "mig": [{"profile": "1g.18gb", "placement": 3}]}))
    assert dev["name"] == "gpu-0-mig-1g18gb-19-3"
    assert dev["capacity"]["memory"] == {"value": "16Gi"}
    assert dev["capacity"]["memorySlice3"] == {"value": "1"}
    (seven,) = api_devices(slices({"profile": "h200", "mig": [{"profile": "7g.141gb"}]}))
    assert seven["capacity"]["memory"] == {"value": "140Gi"}
    assert [k for k in seven["capacity"] if k.startswith("memorySlice")] == [
        f"memorySlice{i}" for i in range(8)
    ]
    assert seven["attributes"]["addressingMode"] == {"string": "None"}


def test_h200_3g_and_4g_split_the_gpu_in_physical_order() -> None:
    devs = devices({"profile": "h200", "mig": [{"profile": "3g.71gb"}, {"profile": "4g.71gb"}]})
    assert [(d.name, d.mig.start, d.mig.size) for d in devs] == [  # type: ignore[union-attr]
        ("gpu-0-mig-4g71gb-5-0", 0, 4),
        ("gpu-0-mig-3g71gb-9-4", 4, 4),
    ]
    assert [d.memory_bytes for d in devs] == [71424 * MIB] * 2


# 2x 1g.10gb, 2g.20gb and 3g.40gb on an A100 80GB: MIG devices of 9728, 19968 and 40192 MiB with 14, 28
# and 42 SMs in the real capture (ztouchnetworks/k8s-dra-driver-gpu README, driver 570.148.08).
A100_80GB_BALANCED = [{"profile": "1g.10gb", "count": 2}, {"profile": "2g.20gb"}, {"profile": "3g.40gb"}]


def test_a100_80gb_balanced_layout_has_the_captured_sizes() -> None:
    devs = devices({"profile": "a100-80gb", "mig": A100_80GB_BALANCED})
    assert [(d.name, d.mig.start, d.mig.size, d.memory_bytes // MIB) for d in devs] == [  # type: ignore[union-attr]
        ("gpu-0-mig-2g20gb-14-0", 0, 2, 19968),
        ("gpu-0-mig-1g10gb-19-2", 2, 1, 9728),
        ("gpu-0-mig-1g10gb-19-3", 3, 1, 9728),
        ("gpu-0-mig-3g40gb-9-4", 4, 4, 40192),
    ]
    three = api_devices(slices({"profile": "a100-80gb", "mig": A100_80GB_BALANCED}))[3]
    assert three["attributes"]["profile"] == {"string": "3g.40gb"}
    assert three["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}
    assert three["capacity"] == {
        "multiprocessors": {"value": "42"}, "copyEngines": {"value": "3"}, "decoders": {"value": "2"},
        "encoders": {"value": "0"}, "jpegEngines": {"value": "0"}, "ofaEngines": {"value": "0"},
        "memory": {"value": "40192Mi"}, **{f"memorySlice{i}": {"value": "1"} for i in range(4, 8)},
    }  # fmt: skip


def test_static_mig_uuids_are_stable_and_follow_the_parent_uuid() -> None:
    layout = {"mig": [{"profile": "2g.35gb", "count": 3}]}
    assert devices({"profile": "h200", **layout}) == devices({"profile": "h200", **layout})
    fixed = "GPU-bd363601-0402-2785-a79b-f013317dbdce"
    devs = devices({"profile": "h200", "uuid": fixed, **layout})
    assert [d.uuid for d in devs] == [mig_uuid(fixed, 14, s) for s in (0, 2, 4)]
    assert {d.parent_uuid for d in devs} == {fixed}


def test_mig_mode_on_without_devices_publishes_nothing_for_that_gpu() -> None:
    devs = devices({"profile": "h200", "mig": []}, {"profile": "t4"})
    assert [(d.name, d.profile) for d in devs] == [("gpu-1", "t4")]


def test_count_applies_the_layout_to_every_gpu_of_the_entry() -> None:
    devs = devices({"profile": "h200", "count": 2, "mig": [{"profile": "7g.141gb"}]})
    assert [d.name for d in devs] == ["gpu-0-mig-7g141gb-0-0", "gpu-1-mig-7g141gb-0-0"]
    assert devs[0].parent_uuid != devs[1].parent_uuid and devs[0].pci_bus_id != devs[1].pci_bus_id


P = "inv.yaml: nodes[0].gpus[0]"


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ({"profile": "t4", "mig": []}, f'{P}.mig: profile "t4" is not MIG capable'),
        ({"profile": "h200", "mig": None}, f"{P}.mig: must be a list, got null"),
        ({"profile": "h200", "mig": [{"profile": "1g.5gb"}]},
         f'{P}.mig[0].profile: unknown MIG profile "1g.5gb" of h200 (known: 1g.18gb, 1g.18gb+me, 1g.35gb, '
         "2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb)"),
        ({"profile": "h200", "mig": ["3g.71gb"]}, f'{P}.mig[0]: must be a mapping, got string "3g.71gb"'),
        ({"profile": "h200", "mig": [{"profile": "3g.71gb", "placement": 2}]},
         f"{P}.mig[0].placement: 2 is not a placement of 3g.71gb (placements: 0, 4)"),
        ({"profile": "h200", "mig": [{"profile": "1g.18gb", "count": 2, "placement": 1}]},
         f"{P}.mig[0].placement: names one MIG device, so it needs count 1, not 2"),
        ({"profile": "h200", "mig": [{"profile": "3g.71gb", "placement": 0},
                                     {"profile": "1g.35gb", "placement": 2}]},
         f"{P}.mig[1].placement: 1g.35gb at 2 uses memory slices 2-3, overlapping {P[10:]}.mig[0]"),
        ({"profile": "h200", "mig": [{"profile": "1g.18gb", "count": 8}]},
         f"{P}.mig[0].count: 8 x 1g.18gb exceed the profile's 7 instances on a GPU"),
        ({"profile": "h200", "mig": [{"profile": "1g.18gb+me"}, {"profile": "1g.18gb+me"}]},
         f"{P}.mig[1].count: 2 x 1g.18gb+me exceed the profile's 1 instance on a GPU"),
        ({"profile": "h200", "mig": [{"profile": "4g.71gb"}, {"profile": "3g.71gb", "count": 2}]},
         f"{P}.mig: the MIG devices do not fit on one GPU: no free placements left for 4g.71gb, 3g.71gb, "
         "3g.71gb"),
        ({"profile": "h200", "mig": [{"profile": "7g.141gb", "slot": 0}]},
         f'{P}.mig[0].slot: unknown field (known fields: count, placement, profile)'),
    ],
)  # fmt: skip
def test_layout_errors_name_the_field(gpu: dict[str, Any], expected: str) -> None:
    assert problems(gpu) == [expected]


def test_mig_profiles_without_known_memory_cannot_be_created() -> None:
    # gb200 knows the memory of 1g.23gb, 1g.23gb+me, 1g.47gb and 2g.47gb only (its data file says why).
    assert problems({"profile": "gb200", "mig": [{"profile": "1g.23gb"}, {"profile": "3g.93gb"}]}) == [
        f'{P}.mig[1].profile: profile "gb200" knows no real memory size of its MIG profile 3g.93gb, '
        "so such MIG devices cannot be published"
    ]
    mig = [{"profile": "1g.23gb", "count": 2}, {"profile": "2g.47gb"}]
    layout = devices({"profile": "gb200", "mig": mig})
    assert [(d.name, d.memory_bytes // MIB) for d in layout] == [
        ("gpu-0-mig-2g47gb-14-0", 46592),
        ("gpu-0-mig-1g23gb-19-2", 22528),
        ("gpu-0-mig-1g23gb-19-3", 22528),
    ]
    assert [d.name for d in devices({"profile": "gb200", "mig": []})] == []
    assert [d.name for d in devices({"profile": "b300"})] == ["gpu-0"]
    with pytest.raises(
        ValueError,
        match=r"nodes\[0\]\.gpus\[0\] on node n: profile b300 knows no real memory size of its MIG profiles "
        r"\(1g\.34gb, 1g\.34gb\+me, 1g\.67gb, 2g\.67gb, 3g\.135gb, 4g\.135gb, 7g\.269gb\)",
    ):
        devices({"profile": "b300"}, dynamic=True)


# ---- DynamicMIG -------------------------------------------------------------------------------------


def test_dynamic_h200_full_gpu_and_every_partition() -> None:
    devs = devices({"profile": "h200"}, dynamic=True)
    names = [d.name for d in devs]
    assert names[0] == "gpu-0" and len(names) == 1 + 7 + 7 + 4 + 3 + 2 + 1 + 1
    assert "gpu-0-mig-1g18gb-me-20-6" in names and "gpu-0-mig-7g141gb-0-0" in names
    full, *partitions = api_devices(slices({"profile": "h200"}, dynamic=True))
    assert full["name"] == "gpu-0" and full["attributes"]["type"] == {"string": "gpu"}
    assert full["capacity"] == {
        "multiprocessors": {"value": "132"}, "copyEngines": {"value": "8"}, "decoders": {"value": "7"},
        "encoders": {"value": "0"}, "jpegEngines": {"value": "7"}, "ofaEngines": {"value": "1"},
        "memory": {"value": "140Gi"},
    }  # fmt: skip
    (consumed,) = full["consumesCounters"]
    assert consumed["counterSet"] == "gpu-0-counter-set"
    assert list(consumed["counters"]) == COUNTER_KEYS + [f"memory-slice-{i}" for i in range(8)]
    part = next(p for p in partitions if p["name"] == "gpu-0-mig-2g35gb-14-2")
    assert "uuid" not in part["attributes"]
    assert set(part["attributes"]) == {"type", "parentUUID", "profile"} | PARENT_KEYS
    assert list(part["capacity"]) == CAPACITY_KEYS
    assert part["capacity"]["memory"] == {"value": "33280Mi"}
    assert part["consumesCounters"] == [
        {"counterSet": "gpu-0-counter-set", "counters": {
            "multiprocessors": {"value": "32"}, "copy-engines": {"value": "2"}, "decoders": {"value": "2"},
            "encoders": {"value": "0"}, "jpeg-engines": {"value": "2"}, "ofa-engines": {"value": "0"},
            "memory": {"value": "33280Mi"},
            "memory-slice-2": {"value": "1"}, "memory-slice-3": {"value": "1"},
        }},
    ]  # fmt: skip


def test_dynamic_layout_counters_first_then_one_device_slice_per_gpu_sorted_by_bus_id() -> None:
    # gpu-1 sits on the lower bus, so its slice and counter set come first.
    rendered = slices(
        {"profile": "h200", "pciBusID": "0000:9a:00.0"},
        {"profile": "h200", "pciBusID": "0000:1b:00.0"},
        dynamic=True,
    )
    assert [list(s["spec"]) for s in rendered] == [["driver", "nodeName", "pool", "sharedCounters"]] + [
        ["driver", "nodeName", "pool", "devices"]
    ] * 2
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in rendered} == {3}
    counters, first, second = rendered
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == [
        "gpu-1-counter-set",
        "gpu-0-counter-set",
    ]
    assert counters["spec"]["sharedCounters"][0]["counters"] == {
        "multiprocessors": {"value": "132"}, "copy-engines": {"value": "8"}, "decoders": {"value": "7"},
        "encoders": {"value": "0"}, "jpeg-engines": {"value": "7"}, "ofa-engines": {"value": "1"},
        "memory": {"value": "140Gi"}, **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }  # fmt: skip
    for s, minor in ((first, 1), (second, 0)):
        names = [d["name"] for d in s["spec"]["devices"]]
        assert names == sorted(names) and names[0] == f"gpu-{minor}"
        assert {d["consumesCounters"][0]["counterSet"] for d in s["spec"]["devices"]} == {
            f"gpu-{minor}-counter-set"
        }


def test_dynamic_ampere_publishes_partitions_only_once_mig_mode_is_on() -> None:
    on = devices({"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}, dynamic=True)
    assert "gpu-0" not in [d.name for d in on] and len(on) == 7 + 7 + 4 + 3 + 2 + 1 + 1
    assert all(d.type == "mig" and d.uuid == "" and d.counter_set is not None for d in on)
    counters, _ = slices({"profile": "a100-40gb", "mig": []}, dynamic=True)
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == ["gpu-0-counter-set"]
    assert counters["spec"]["sharedCounters"][0]["counters"]["memory"] == {"value": "40192Mi"}
    # MIG mode off: Ampere cannot toggle it, so the GPU stays a plain full GPU in the one-slice layout.
    (plain,) = slices({"profile": "a100-40gb"}, dynamic=True)
    assert [d["name"] for d in plain["spec"]["devices"]] == ["gpu-0"]
    assert plain["spec"]["devices"][0]["capacity"] == {"memory": {"value": "40Gi"}}


def test_dynamic_h100_publishes_what_the_real_driver_published() -> None:
    """The DRA driver's DynamicMIG slices of a p5.48xlarge H100 80GB HBM3 (transcribed in
    aws/karpenter-provider-aws pkg/providers/nvidiadra): 25 partitions per GPU, named by profile, GI
    profile id and placement, and a counter set of 81152Mi, 132 SMs, 8 CEs, 7 DECs, 7 JPEGs, 1 OFA."""
    rendered = slices({"profile": "h100-80gb-hbm3"}, dynamic=True)
    full, *partitions = api_devices(rendered)
    captured = {
        "1g10gb-19": range(7), "1g10gb-me-20": range(7), "1g20gb-15": (0, 2, 4, 6), "2g20gb-14": (0, 2, 4),
        "3g40gb-9": (0, 4), "4g40gb-5": (0,), "7g80gb-0": (0,),
    }  # fmt: skip
    assert sorted(p["name"] for p in partitions) == sorted(
        f"gpu-0-mig-{prefix}-{start}" for prefix, starts in captured.items() for start in starts
    )
    maxima = {
        "multiprocessors": "132", "copy-engines": "8", "decoders": "7", "encoders": "0", "jpeg-engines": "7",
        "ofa-engines": "1", "memory": "81152Mi",
    }  # fmt: skip
    assert rendered[0]["spec"]["sharedCounters"][0]["counters"] == {
        **{k: {"value": v} for k, v in maxima.items()},
        **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }
    assert full["name"] == "gpu-0" and full["capacity"]["memory"] == {"value": "81152Mi"}
    by_name = {p["name"]: p for p in partitions}
    memory = {name: p["capacity"]["memory"]["value"] for name, p in by_name.items() if name.endswith("-0")}
    assert memory == {
        "gpu-0-mig-1g10gb-19-0": "9984Mi", "gpu-0-mig-1g10gb-me-20-0": "9984Mi",
        "gpu-0-mig-1g20gb-15-0": "20096Mi", "gpu-0-mig-2g20gb-14-0": "20096Mi",
        "gpu-0-mig-3g40gb-9-0": "40448Mi", "gpu-0-mig-4g40gb-5-0": "40448Mi",
        "gpu-0-mig-7g80gb-0-0": "81152Mi",
    }  # fmt: skip
    assert by_name["gpu-0-mig-1g20gb-15-6"]["consumesCounters"][0]["counters"] == {
        "multiprocessors": {"value": "26"}, "copy-engines": {"value": "1"}, "decoders": {"value": "1"},
        "encoders": {"value": "0"}, "jpeg-engines": {"value": "1"}, "ofa-engines": {"value": "0"},
        "memory": {"value": "20096Mi"}, "memory-slice-6": {"value": "1"}, "memory-slice-7": {"value": "1"},
    }  # fmt: skip


def test_dynamic_a100_80gb_partitions_once_mig_mode_is_on() -> None:
    on = devices({"profile": "a100-80gb", "mig": []}, dynamic=True)
    assert "gpu-0" not in [d.name for d in on] and len(on) == 25
    counters, _ = slices({"profile": "a100-80gb", "mig": []}, dynamic=True)
    (counter_set,) = counters["spec"]["sharedCounters"]
    assert counter_set["counters"]["memory"] == {"value": "79Gi"}  # 7g.80gb: 80896 MiB
    assert counter_set["counters"]["multiprocessors"] == {"value": "98"}
    assert [d.name for d in devices({"profile": "a100-80gb"}, dynamic=True)] == ["gpu-0"]


@pytest.mark.parametrize("server", [(1, 34), (1, 33)])
def test_before_1_35_each_gpu_slice_holds_its_counter_set_and_its_devices(server: tuple[int, int]) -> None:
    # The driver's combined layout (an API server before 1.35): G slices, no counters-only slice.
    split = slices(
        {"profile": "h200", "pciBusID": "0000:9a:00.0"},
        {"profile": "h200", "pciBusID": "0000:1b:00.0"},
        dynamic=True,
    )
    combined = slices(
        {"profile": "h200", "pciBusID": "0000:9a:00.0"},
        {"profile": "h200", "pciBusID": "0000:1b:00.0"},
        dynamic=True,
        server=server,
    )
    assert [list(s["spec"]) for s in combined] == [
        ["driver", "nodeName", "pool", "sharedCounters", "devices"]
    ] * 2
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in combined} == {2}
    # Same counter sets and devices as the 1.35 layout, only regrouped: gpu-1 (lower bus) first.
    assert [c["name"] for s in combined for c in s["spec"]["sharedCounters"]] == [
        "gpu-1-counter-set",
        "gpu-0-counter-set",
    ]
    assert [s["spec"]["sharedCounters"] for s in combined] == [
        [c] for c in split[0]["spec"]["sharedCounters"]
    ]
    assert [s["spec"]["devices"] for s in combined] == [s["spec"]["devices"] for s in split[1:]]
    for s in combined:
        (counter_set,) = s["spec"]["sharedCounters"]
        assert {d["consumesCounters"][0]["counterSet"] for d in s["spec"]["devices"]} == {counter_set["name"]}
    # A GPU without MIG publishes no counter set: its slice has devices only.
    mixed = slices({"profile": "h200"}, {"profile": "t4"}, dynamic=True, server=server)
    assert [sorted(s["spec"]) for s in mixed] == [
        ["devices", "driver", "nodeName", "pool", "sharedCounters"],
        ["devices", "driver", "nodeName", "pool"],
    ]
    # Plain pools are the same on every version.
    assert slices({"profile": "t4"}, server=server) == slices({"profile": "t4"})


def test_dynamic_hopper_ignores_a_static_layout() -> None:
    assert devices({"profile": "h200", "mig": [{"profile": "7g.141gb"}]}, dynamic=True) == devices(
        {"profile": "h200"}, dynamic=True
    )


def test_dynamic_non_mig_gpus_keep_the_plain_shape_in_their_own_slice() -> None:
    rendered = slices({"profile": "h200"}, {"profile": "t4"}, dynamic=True)
    assert len(rendered) == 3
    t4 = [s for s in rendered if [d["name"] for d in s["spec"].get("devices", [])] == ["gpu-1"]]
    assert len(t4) == 1 and "consumesCounters" not in t4[0]["spec"]["devices"][0]


def test_slice_limits_64_devices_and_8_counter_sets() -> None:
    nine = slices({"profile": "h200", "count": 9}, dynamic=True)
    kinds = ["sharedCounters" if "sharedCounters" in s["spec"] else "devices" for s in nine]
    assert kinds == ["sharedCounters"] * 2 + ["devices"] * 9
    assert [len(s["spec"]["sharedCounters"]) for s in nine[:2]] == [8, 1]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in nine} == {11}
    assert not any("devices" in s["spec"] and "sharedCounters" in s["spec"] for s in nine)
    # A GPU with more than 64 devices (none exists yet) is cut into slices of at most 64.
    one_gpu = devices({"profile": "h200"}, dynamic=True)
    many = [replace(one_gpu[1], name=f"gpu-0-mig-x-{i:03d}") for i in range(70)]
    layout = partitionable_layout(many)
    assert [len(c.get("devices", c.get("sharedCounters", []))) for c in layout] == [
        1,
        MAX_DEVICES_RESTRICTED,
        6,
    ]


def test_a_dynamic_pool_refuses_api_shaped_devices() -> None:
    devs: list[Any] = devices({"profile": "h200"}, dynamic=True)
    with pytest.raises(ValueError, match="GpuDevices only"):
        resource_slices([*devs, {"name": "x"}], driver="gpu.nvidia.com", node_name="n", node_uid="u")


# ---- render (golden files) --------------------------------------------------------------------------
# At release 25.12, as the top-level goldens (tests/test_golden.py; other releases: releases/<release>/).
LAB_RELEASE = releases.get("25.12")


@pytest.mark.parametrize(
    ("golden", "node", "dynamic"),
    [
        ("mig-a100-40gb-7x1g5gb-static.yaml", "a100-static", False),
        ("mig-h200-3g-4g-static.yaml", "h200-static", False),
        ("mig-h200x2-dynamic.yaml", "h200-dynamic", True),
    ],
)
def test_render_golden(golden: str, node: str, dynamic: bool) -> None:
    docs = render_documents(load_inventory(MIG_EXAMPLE), node=node, dynamic_mig=dynamic, release=LAB_RELEASE)
    assert all(d["kind"] == "ResourceSlice" for d in docs[3:])
    check_golden(golden, docs[3:])


@pytest.mark.parametrize(
    ("golden", "gpu", "dynamic"),
    [
        ("mig-a100-80gb-balanced-static.yaml", {"profile": "a100-80gb", "mig": A100_80GB_BALANCED}, False),
        ("mig-h100-dynamic.yaml", {"profile": "h100-80gb-hbm3"}, True),
    ],
)
def test_render_golden_80gb(golden: str, gpu: dict[str, Any], dynamic: bool) -> None:
    docs = render_documents(inventory(gpu), node="n", dynamic_mig=dynamic, release=LAB_RELEASE)
    assert all(d["kind"] == "ResourceSlice" for d in docs[3:])
    check_golden(golden, docs[3:])


# ---- CDI and Prepare --------------------------------------------------------------------------------


def test_cdi_spec_of_a_mig_device() -> None:
    (dev,) = devices({"profile": "h200", "mig": [{"profile": "3g.71gb", "placement": 4}]})
    spec = cdispec.claim_spec("c1a1", [dev], driver_name="gpu.nvidia.com", device_nodes=True)
    assert cdi.validate_spec(spec) == []
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec["containerEdits"]["env"]
    (entry,) = spec["devices"]
    assert entry["name"] == "c1a1-gpu-0-mig-3g71gb-9-4"
    assert entry["containerEdits"]["env"] == [
        f"FAKEPLUGIN_GPU_0_MIG_9_4_UUID={dev.uuid}",
        "FAKEPLUGIN_GPU_0_MIG_9_4_DEVICE=gpu-0-mig-3g71gb-9-4",
    ]
    assert entry["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
    ]


def write_inventory(path: Path, gpus: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump({"driverVersion": "580.159.04", "cudaDriverVersion": "13.0",
                                    "nodes": [{"name": "n", "gpus": gpus}]}))  # fmt: skip
    return path


def prepare(tmp_path: Path, pool: NodeDevices, claims: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Prepare each claim (uid → allocated device names) on node n; returns uid → its CDI spec."""

    def get_claim(namespace: str, name: str) -> dict[str, Any]:
        uid = name.removeprefix("claim-")
        results = [
            {"request": "r", "driver": "gpu.nvidia.com", "pool": "n", "device": d} for d in claims[uid]
        ]
        return {"metadata": {"uid": uid}, "status": {"allocation": {"devices": {"results": results}}}}

    preparer = GpuPreparer(
        driver_name="gpu.nvidia.com",
        node_name="n",
        devices=pool,
        get_claim=get_claim,
        cdi_root=tmp_path / "cdi",
        plugin_dir=tmp_path / "plugin",
        boot_id="0b00b00b-0000-4000-8000-000000000001",
    )
    refs = [ClaimRef("ns", uid, f"claim-{uid}") for uid in claims]
    outcome = preparer.prepare([Claim(ref, get_claim(ref.namespace, ref.name)) for ref in refs])
    assert {uid: r.error for uid, r in outcome.items()} == dict.fromkeys(claims, "")
    return {
        r.uid: yaml.safe_load(
            cdi.spec_path(tmp_path / "cdi", r.uid, driver_name="gpu.nvidia.com").read_text()
        )
        for r in refs
    }


def test_prepare_dynamic_partitions_creates_them_with_a_uuid_per_claim(tmp_path: Path) -> None:
    pool = NodeDevices(
        write_inventory(tmp_path / "inv.yaml", [{"profile": "h200"}]),
        "n",
        driver="gpu.nvidia.com",
        dynamic_mig=True,
    )
    assert "gpu-0-mig-3g71gb-9-4" in pool and "gpu-0" in pool
    specs = prepare(tmp_path, pool, {"a1": ["gpu-0-mig-3g71gb-9-4"], "b2": ["gpu-0-mig-4g71gb-5-0"]})
    parent = pool["gpu-0"].uuid
    for uid, gi, start in (("a1", 9, 4), ("b2", 5, 0)):
        assert specs[uid]["devices"][0]["containerEdits"]["env"][0] == (
            f"FAKEPLUGIN_GPU_0_MIG_{gi}_{start}_UUID={mig_uuid(parent, gi, start, uid)}"
        )
    # Another claim gets the same partition (once the first let it go) as a new MIG device: new UUID.
    assert mig_uuid(parent, 9, 4, "a1") != mig_uuid(parent, 9, 4, "c3")


def test_prepare_static_mig_device_uses_its_published_uuid(tmp_path: Path) -> None:
    layout = [{"profile": "a100-40gb", "mig": [{"profile": "1g.5gb", "count": 7}]}]
    pool = NodeDevices(write_inventory(tmp_path / "inv.yaml", layout), "n", driver="gpu.nvidia.com")
    assert "gpu-0" not in pool and len(pool) == 7
    specs = prepare(tmp_path, pool, {"a1": ["gpu-0-mig-1g5gb-19-2", "gpu-0-mig-1g5gb-19-5"]})
    uuids = [pool[f"gpu-0-mig-1g5gb-19-{i}"].uuid for i in (2, 5)]
    assert [d["containerEdits"]["env"][0] for d in specs["a1"]["devices"]] == [
        f"FAKEPLUGIN_GPU_0_MIG_19_{i}_UUID={uuid}" for i, uuid in zip((2, 5), uuids, strict=True)
    ]
    assert [d["name"] for d in specs["a1"]["devices"]] == [
        "a1-gpu-0-mig-1g5gb-19-2",
        "a1-gpu-0-mig-1g5gb-19-5",
    ]
