"""Consumable shares (pure): several claims on one device, each consuming part of its capacity.

Only in the driver's main (release "0.5.0-dev", commit 95932046), behind its gate `ConsumableShares` and the
flag `--consumable-shares` (env `CONSUMABLE_SHARES`, chart value `consumableShares`). Sources, all at
95932046 in kubernetes-sigs/dra-driver-nvidia-gpu:
- cmd/gpu-kubelet-plugin/main.go: the flag (default `disabled`) and `validateCLIFlags`, run at start after
  the gates are validated: a mode other than `disabled` needs the gate; the mode is `disabled`, `memory`,
  `unlimited` or a positive integer (Go's strconv.Atoi: an optional sign, ASCII digits);
- cmd/gpu-kubelet-plugin/consumable_shares.go: `isConsumableSharesEnabled` (the gate on and a mode other
  than `disabled`: with `parse` below, any mode but DISABLED) and `applyConsumableShares`, which shapes
  each published device (full GPUs, static MIG devices, DynamicMIG partitions: allocatable.go
  `GetDevice`, partitions.go `PartGetDevice`; never VFIO devices: publish.slices `vfio_to_api`);
- cmd/gpu-kubelet-plugin/device_state.go: the overlap check lets a device be prepared for two claims when
  both claims' normalized configs for it are equal (drivers.gpu.prepare.preparer), and `applySharingConfig`
  refuses MPS (fakeplugin.drivers.gpu.prepare.opaqueconfig).

The Kubernetes side is the DRAConsumableCapacity gate (alpha, off, in 1.34 and 1.35; beta, on, from 1.36):
without it the API server drops `allowMultipleAllocations` and `requestPolicy` from slices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fakeplugin import releases
from fakeplugin.releases import DriverRelease

DISABLED = "disabled"
GATE = "ConsumableShares"
MIB = 1 << 20
_ATOI = re.compile(r"[+-]?[0-9]+")  # what Go's strconv.Atoi accepts (no spaces, no underscores)


def parse(value: str | None, gates: Mapping[str, bool], release: DriverRelease) -> str:
    """The mode the plugin runs with, checked as the release checks it at start; ValueError otherwise.

    `value`: the flag or env as given (None or "": the default, `disabled`). A release without the feature
    refuses any other mode, naming the release; then the real driver's texts, under its `invalid CLI flags:`.
    """
    mode = value or DISABLED
    if mode == DISABLED:
        return mode
    if GATE not in release.feature_gates:
        raise ValueError(
            f"--consumable-shares {mode}: NVIDIA driver release {release.name} has no consumable shares "
            f"(only {_releases_with_shares()} have them)"
        )
    if not gates.get(GATE, False):
        raise ValueError(f"invalid CLI flags: --consumable-shares requires feature gate {GATE} to be enabled")
    if mode not in ("memory", "unlimited") and not (_ATOI.fullmatch(mode) and 0 < int(mode) < 1 << 63):
        raise ValueError(
            f'invalid CLI flags: invalid value for --consumable-shares: "{mode}" '
            "(must be 'disabled', 'memory', 'unlimited', or a positive integer)"
        )
    return mode


def _releases_with_shares() -> str:
    """The releases that know the gate (fakeplugin.releases): `0.5.0-dev, the driver's main at 95932046, and
    0.5.0`."""
    return " and ".join(
        r.name if r.tag else f"{r.name}, the driver's main at {r.commit[:8]},"
        for r in releases.RELEASES.values()
        if GATE in r.feature_gates
    )


def memory_limit(memory_bytes: int) -> int:
    """The memory capacity rounded down to a whole MiB: a validRange's max must be a multiple of its step."""
    return memory_bytes // MIB * MIB


def shape_device(device: Mapping[str, Any], mode: str, limit: str) -> dict[str, Any]:
    """A published device (API dict, with a `memory` capacity) as consumable_shares.go applyConsumableShares
    leaves it for an enabled `mode`; `limit`: the canonical text of `memory_limit` of its memory."""
    out = dict(device)
    out["allowMultipleAllocations"] = True
    capacity = {name: dict(c) for name, c in (device.get("capacity") or {}).items()}
    out["capacity"] = capacity
    if "memory" not in capacity:
        return out
    capacity["memory"]["value"] = limit
    if mode == "memory":
        capacity["memory"]["requestPolicy"] = _policy(limit, "1Mi", limit, "1Mi")
    elif mode == "unlimited":
        capacity["memory"]["requestPolicy"] = _policy("0", "0", limit, "1Mi")
    elif _ATOI.fullmatch(mode) and (shares := int(mode)) > 0:
        capacity["memory"]["requestPolicy"] = _policy("0", "0", limit, "1Mi")
        capacity["shares"] = {"value": str(shares), "requestPolicy": _policy("1", "1", str(shares), "1")}
    return out


def _policy(default: str, low: str, high: str, step: str) -> dict[str, Any]:
    """CapacityRequestPolicy in the API's field order."""
    return {"default": default, "validRange": {"min": low, "max": high, "step": step}}
