"""MIG (Multi-Instance GPU) the way NVIDIA's driver names, places and publishes it (pure).

Rules (kubernetes-sigs/dra-driver-nvidia-gpu v25.12.0, cmd/gpu-kubelet-plugin/mig.go ToCanonicalName,
CommonAttributesMig, partitions.go, deviceinfo.go MigDeviceInfo.GetDevice):
- a MIG device is `gpu-<parentMinor>-mig-<P>-<giProfileId>-<placementStart>`, P being the profile name
  without dots, lower-cased, every character outside [a-z0-9-.] turned into '-' (`1g.18gb+me` → `1g18gb-me`);
- a MIG device occupies the memory slices [start, start + size) of its placement; two MIG devices of one
  GPU never share a memory slice;
- DynamicMIG counters are named after the capacities they mirror (camelToDNSName: `copyEngines` →
  `copy-engines`), plus one counter `memory-slice-<i>` per memory slice.

UUIDs are derived, never random, so the same inventory gives the same devices after a restart: a static
MIG device's from its parent's UUID and placement (pre-created MIG devices keep theirs); a DynamicMIG
partition has none until Prepare creates it, and then one that also depends on the claim UID (NVML gives a
re-created MIG device a new UUID; the same claim always gets the same one, so its CDI spec can be rewritten).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import replace

from fakeplugin.model import GpuDevice
from fakeplugin.profiles import UnknownProfileError, load_profile

_NOT_RFC1123 = re.compile(r"[^a-z0-9-.]")
_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_UPPER_RUN = re.compile(r"([A-Z]+)([A-Z][a-z])")


def rfc1123(name: str) -> str:
    """The driver's toRFC1123Compliant: lower-case, [^a-z0-9-.] → '-', no leading/trailing '-' or '.'."""
    name = _NOT_RFC1123.sub("-", name.lower()).strip("-").removesuffix(".")
    return name[:253]


def camel_to_dns_name(name: str) -> str:
    """Counter name of a capacity: `copyEngines` → `copy-engines`, `HTTPServer` → `http-server`."""
    return rfc1123(_UPPER_RUN.sub(r"\1-\2", _LOWER_UPPER.sub(r"\1-\2", name)))


def canonical_name(parent_minor: int, profile: str, gi_profile_id: int, start: int) -> str:
    """`gpu-0-mig-1g18gb-19-3` for 1g.18gb (GI profile 19) at memory slice 3 of GPU 0."""
    return f"gpu-{parent_minor}-mig-{rfc1123(profile.replace('.', ''))}-{gi_profile_id}-{start}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    return f"memory-slice-{index}"


def mig_uuid(parent_uuid: str, gi_profile_id: int, start: int, claim_uid: str = "") -> str:
    """NVML-style MIG UUID, MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (lower-case hex)."""
    h = hashlib.sha256(
        f"fakeplugin/mig/{parent_uuid}/{gi_profile_id}/{start}/{claim_uid}".encode()
    ).hexdigest()
    return f"MIG-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def created_for_claim(device: GpuDevice, claim_uid: str) -> GpuDevice:
    """The device as Prepare hands it to a claim: a DynamicMIG partition is created then and gets its
    UUID; every other device is returned unchanged."""
    if device.mig is None or device.uuid or device.parent_uuid is None:
        return device
    uuid = mig_uuid(device.parent_uuid, device.mig.gi_profile_id, device.mig.start, claim_uid)
    return replace(device, uuid=uuid)


def place(
    candidates: Sequence[tuple[Sequence[int], int]], taken: frozenset[int] = frozenset()
) -> list[int] | None:
    """Placement starts for MIG devices given as (possible starts, size), in their order, such that no two
    share a memory slice and none uses a slice in `taken`; None when no such layout exists.

    Larger devices are placed first, each at its lowest free start, backtracking when the rest does not fit
    (NVML's possible placements are few: at most a handful of starts over 8 memory slices).
    """
    order = sorted(range(len(candidates)), key=lambda i: -candidates[i][1])

    def solve(k: int, used: frozenset[int]) -> dict[int, int] | None:
        if k == len(order):
            return {}
        starts, size = candidates[order[k]]
        for start in starts:
            span = frozenset(range(start, start + size))
            if not span & used:
                rest = solve(k + 1, used | span)
                if rest is not None:
                    return {order[k]: start, **rest}
        return None

    found = solve(0, taken)
    return None if found is None else [found[i] for i in range(len(candidates))]


def gpu_instance_id(device: GpuDevice) -> int:
    """NVML's GPU instance ID of a MIG device: the placement's node in the GPU's slice tree, numbered
    breadth first (the whole GPU 0, its halves 1-2, quarters 3-6, eighths 7-14). [U] inferred: it gives the
    IDs real exporters show (an A30's 1g.6gb 3..6: dcgm-exporter #317; an H100's 1g.10gb 7, 8, 9: #512)."""
    assert device.mig is not None
    size = max(device.mig.size, 1)
    return memory_slices(device) // size - 1 + device.mig.start // size


def memory_slices(device: GpuDevice) -> int:
    """The memory slices of the device's GPU (its profile's MIG capability; 8, the most, when unknown)."""
    try:
        capability = load_profile(device.profile).mig
    except UnknownProfileError:  # an inventory's own model
        return 8
    return capability.memory_slices if capability else 8
