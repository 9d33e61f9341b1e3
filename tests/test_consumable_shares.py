"""Consumable shares (fakeplugin.consumableshares, release 0.5.0-dev): start-time checks and the slice shape,
mirroring the real driver's tests at main 95932046 (cmd/gpu-kubelet-plugin/main_test.go
TestValidateCLIFlagsConsumableShares, consumable_shares_test.go TestApplyConsumableShares)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fakeplugin import consumableshares, featuregates, releases
from fakeplugin.drivers.gpu.publish.slices import device_to_api, resource_slices
from tests.harness.cli import render_cli
from tests.harness.factories import T10, numbered
from tests.harness.inventory import devices
from tests.harness.paths import SEED_LAB

DEV = releases.get("0.5.0-dev")
ON = featuregates.parse("ConsumableShares=true", DEV)
OFF = featuregates.parse("", DEV)
REQUIRES = "invalid CLI flags: --consumable-shares requires feature gate ConsumableShares to be enabled"


def invalid(value: str) -> str:
    return (
        f'invalid CLI flags: invalid value for --consumable-shares: "{value}" '
        "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"
    )


@pytest.mark.parametrize(
    ("gates", "value", "error"),
    [
        (ON, "unlimited", ""),
        (ON, "memory", ""),
        (ON, "4", ""),
        (ON, "+4", ""),  # strconv.Atoi takes a sign
        (ON, "0", invalid("0")),
        (ON, "-2", invalid("-2")),
        (ON, " 4", invalid(" 4")),  # ... but no spaces
        (ON, "4_0", invalid("4_0")),  # ... nor underscores
        (ON, "invalid", invalid("invalid")),
        (OFF, "unlimited", REQUIRES),
        (OFF, "invalid", REQUIRES),  # the gate is checked first
        (OFF, "disabled", ""),
        (OFF, "", ""),  # not given: the flag's default, disabled
    ],
)
def test_the_mode_is_checked_at_start_with_the_real_texts(
    gates: dict[str, bool], value: str, error: str
) -> None:
    if error:
        with pytest.raises(ValueError) as caught:
            consumableshares.parse(value, gates, DEV)
        assert str(caught.value) == error
    else:
        assert consumableshares.parse(value, gates, DEV) == (value or "disabled")


@pytest.mark.parametrize("release", ["25.12", "0.4.1"])
def test_older_releases_refuse_any_mode_but_disabled_naming_the_release(release: str) -> None:
    r = releases.get(release)
    gates = featuregates.parse("", r)
    assert consumableshares.parse("disabled", gates, r) == "disabled"
    with pytest.raises(ValueError) as caught:
        consumableshares.parse("memory", gates, r)
    assert str(caught.value) == (
        f"--consumable-shares memory: NVIDIA driver release {release} has no consumable shares "
        "(only 0.5.0-dev, the driver's main at 95932046, and 0.5.0 have them)"
    )


def policy(default: str, low: str, high: str, step: str) -> dict[str, Any]:
    return {"default": default, "validRange": {"min": low, "max": high, "step": step}}


def gpu(memory_bytes: int = 16 << 30) -> Any:
    return replace(numbered(T10, 0), memory_bytes=memory_bytes)


def test_disabled_leaves_the_device_alone() -> None:
    assert device_to_api(gpu(), DEV, "disabled") == device_to_api(gpu(), DEV)
    assert "allowMultipleAllocations" not in device_to_api(gpu(), DEV)


@pytest.mark.parametrize(
    ("mode", "memory", "capacity"),
    [
        (
            "unlimited",
            16 << 30,
            {"memory": {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")}},
        ),
        (  # unaligned memory: value and max rounded down to a whole MiB
            "unlimited",
            (10 << 20) + 500,
            {"memory": {"value": "10Mi", "requestPolicy": policy("0", "0", "10Mi", "1Mi")}},
        ),
        (
            "memory",
            16 << 30,
            {"memory": {"value": "16Gi", "requestPolicy": policy("16Gi", "1Mi", "16Gi", "1Mi")}},
        ),
        (
            "4",
            16 << 30,
            {
                "memory": {"value": "16Gi", "requestPolicy": policy("0", "0", "16Gi", "1Mi")},
                "shares": {"value": "4", "requestPolicy": policy("1", "1", "4", "1")},
            },
        ),
    ],
)  # fmt: skip
def test_a_full_gpu_gets_multiple_allocations_and_request_policies(
    mode: str, memory: int, capacity: dict[str, Any]
) -> None:
    device = device_to_api(gpu(memory), DEV, mode)
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"] == capacity
    assert device["attributes"] == device_to_api(gpu(memory), DEV)["attributes"]


def test_static_mig_devices_are_shared_by_their_memory() -> None:
    mig = [d for d in devices({"profile": "a100-40gb", "mig": [{"profile": "3g.20gb"}]}) if d.mig]
    device = device_to_api(mig[0], DEV, "memory")
    plain = device_to_api(mig[0], DEV)
    assert device["allowMultipleAllocations"] is True
    memory = plain["capacity"]["memory"]["value"]
    assert device["capacity"]["memory"] == {
        "value": memory,
        "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
    }
    others = {k: v for k, v in device["capacity"].items() if k != "memory"}
    assert others == {k: v for k, v in plain["capacity"].items() if k != "memory"}


def test_dynamic_mig_partitions_keep_their_counters() -> None:
    parts = devices({"profile": "h200"}, dynamic=True)
    sliced = resource_slices(parts, driver="gpu.nvidia.com", node_name="n", node_uid="u", release=DEV,
                             consumable_shares="unlimited")  # fmt: skip
    plain = resource_slices(parts, driver="gpu.nvidia.com", node_name="n", node_uid="u", release=DEV)
    shared = [d for s in sliced for d in s["spec"].get("devices", [])]
    before = [d for s in plain for d in s["spec"].get("devices", [])]
    assert len(shared) == len(before) > 1
    for a, b in zip(shared, before, strict=True):
        assert a["allowMultipleAllocations"] is True
        assert a["consumesCounters"] == b["consumesCounters"]
        assert (
            a["capacity"]["memory"]["requestPolicy"]["validRange"]["max"] == a["capacity"]["memory"]["value"]
        )
    assert [s["spec"].get("sharedCounters") for s in sliced] == [
        s["spec"].get("sharedCounters") for s in plain
    ]


def test_render_and_serve_take_the_flag_and_its_env(tmp_path: Path) -> None:
    ok = render_cli("--driver-release", "0.5.0-dev", "--feature-gates", "ConsumableShares=true",
                    "--consumable-shares", "unlimited")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("allowMultipleAllocations: true") == 3  # the seed lab's three GPUs
    env = {**os.environ, "CONSUMABLE_SHARES": "memory", "DRIVER_RELEASE": "0.5.0-dev"}
    for command in ("render", "serve"):
        bad = subprocess.run(
            [sys.executable, "-m", "fakeplugin", command, "--inventory", str(SEED_LAB), "--node-name", "n"]
            if command == "serve"
            else [sys.executable, "-m", "fakeplugin", command, "--inventory", str(SEED_LAB)],
            capture_output=True, text=True, timeout=60, check=False, env=env, cwd=tmp_path,
        )  # fmt: skip
        assert bad.returncode != 0
        assert REQUIRES in bad.stderr, bad.stderr
