"""A `gpus[]` entry of the inventory read and checked: its profile, memory, overrides and static MIG layout
(pure; every problem with its field path, collected in a yamlschema.Problems)."""

from __future__ import annotations

import re
from typing import Any

from fakeplugin import quantity
from fakeplugin.inventory.fields import (
    MAX_ATTRIBUTE_STRING,
    MAX_GPU_MEMORY,
    MAX_GPUS_PER_NODE,
    MAX_NUMA_NODES,
)
from fakeplugin.inventory.model import GpuEntry, MigInstance
from fakeplugin.mig import place
from fakeplugin.profiles import MigProfile, Profile, UnknownProfileError, load_profile, profile_names
from fakeplugin.yamlschema import Problems, join, path_key, shorten

_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI = re.compile(r"^(?:0000)?([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$", re.IGNORECASE)
# The quantities a memory total is written as (NVML's MiB, kubectl's Gi): whole, binary, up to Ti.
_MEMORY_QUANTITY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti)?")


def parse_quantity(value: str) -> int:
    """Bytes of a binary quantity (`23028Mi`, `15Gi`, `1024`): fakeplugin.quantity's value of the forms
    `_MEMORY_QUANTITY` allows; ValueError otherwise."""
    if not _MEMORY_QUANTITY.fullmatch(value):
        raise ValueError(f'"{value}" is not a quantity like 23028Mi, 15Gi or a number of bytes')
    return quantity.value(value)


def parse_gpu(p: Problems, raw: Any, path: str) -> GpuEntry | None:
    """The `gpus[]` entry `raw` at `path`; None (its problems added to `p`) when it cannot be made."""
    m = p.mapping(
        raw,
        path,
        required=("profile",),
        optional=("count", "ecc", "memory", "productName", "uuid", "pciBusID", "mig", "numaNode"),
    )
    if m is None:
        return None
    profile = None
    name = p.string(m, "profile", path)
    if name is not None:
        try:
            profile = load_profile(name)
        except UnknownProfileError:
            p.add(
                join(path, "profile"),
                f'unknown profile "{shorten(name)}" (known: {", ".join(profile_names())})',
            )
    count = (
        p.integer(m, "count", path, minimum=1, maximum=MAX_GPUS_PER_NODE, why="GPUs per node")
        if "count" in m
        else 1
    )
    ecc = p.boolean(m, "ecc", path)
    memory = _memory(p, m, path)
    product = p.string(m, "productName", path)
    if product is not None and len(product) > MAX_ATTRIBUTE_STRING:
        p.add(join(path, "productName"), f"must be at most {MAX_ATTRIBUTE_STRING} characters")
    uuid = string_like(p, m, "uuid", path, _UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)")
    bus = string_like(p, m, "pciBusID", path, _PCI, '"0000:3b:00.0" (domain:bus:device.function, hex)')
    numa_node = None
    if "numaNode" in m:
        why = "the most NUMA nodes of a node"
        numa_node = p.integer(m, "numaNode", path, minimum=0, maximum=MAX_NUMA_NODES - 1, why=why)
    for key in ("uuid", "pciBusID"):
        if key in m and count is not None and count > 1:
            p.add(join(path, key), f"names one GPU, so it needs count 1 (count is {count})")
    if profile is None or count is None:
        return None
    mig = _mig(p, m, path, profile) if "mig" in m else None
    ecc = profile.ecc_default if ecc is None else ecc
    if memory is None and "memory" not in m:
        memory = profile.memory_bytes(ecc)
        if memory is None:
            p.add(
                join(path, "ecc" if "ecc" in m else "profile"),
                f'profile "{profile.name}" knows no memory total with ECC {"on" if ecc else "off"}; '
                "set memory to the real NVML memory.total (a quantity like 23028Mi)",
            )
    # A None memory was reported above, so this entry never reaches a valid Inventory.
    return GpuEntry(
        profile=profile,
        count=count,
        ecc=ecc,
        memory_bytes=memory or 0,
        product_name=product or profile.product_name,
        uuid=uuid and "GPU-" + uuid[4:].lower(),
        pci_bus_id=bus and _normalise_pci(bus),
        path=path,
        mig=mig,
        numa_node=numa_node,
    )


def _mig(p: Problems, m: dict[str, Any], path: str, profile: Profile) -> tuple[MigInstance, ...] | None:
    """A static MIG layout: every item valid, of a MIG profile whose memory is known, within the profiles'
    instance limits, no memory slice twice."""
    problems_before = len(p.lines)
    raw = p.sequence(m, "mig", path)
    where = join(path, "mig")
    if raw is None:
        return None
    if profile.mig is None:
        p.add(where, f'profile "{profile.name}" is not MIG capable')
        return None
    most = max(mp.instances for mp in profile.mig.profiles)  # 7 on A100, H100, H200
    if len(raw) > most:  # every item is at least one MIG device
        p.add(where, f"{len(raw)} entries; a {profile.name} has at most {most} MIG devices")
        return None
    by_name = {mp.name: mp for mp in profile.mig.profiles}
    fixed: list[tuple[MigProfile, int, str]] = []  # (profile, start, item path)
    free: list[MigProfile] = []  # placed automatically
    per_profile: dict[str, int] = {}
    for i, item in enumerate(raw):
        item_path = f"{where}[{i}]"
        im = p.mapping(item, item_path, required=("profile",), optional=("count", "placement"))
        if im is None:
            continue
        name = p.string(im, "profile", item_path)
        mig_profile = by_name.get(name) if name is not None else None
        if name is not None and mig_profile is None:
            p.add(
                join(item_path, "profile"),
                f'unknown MIG profile "{shorten(name)}" of {profile.name} (known: {", ".join(by_name)})',
            )
        # No maximum here: the profile's instance limit below refuses a large count before it is used.
        count = p.integer(im, "count", item_path, minimum=1) if "count" in im else 1
        start = p.integer(im, "placement", item_path, minimum=0) if "placement" in im else None
        if "placement" in im and count is not None and count > 1:
            p.add(join(item_path, "placement"), f"names one MIG device, so it needs count 1, not {count}")
            continue
        if mig_profile is None or count is None:
            continue
        if mig_profile.memory_mib is None:
            p.add(
                join(item_path, "profile"),
                f'profile "{profile.name}" knows no real memory size of its MIG profile {mig_profile.name}, '
                "so such MIG devices cannot be published",
            )
            continue
        if start is not None and start not in mig_profile.placement_starts:
            p.add(
                join(item_path, "placement"),
                f"{start} is not a placement of {mig_profile.name} "
                f"(placements: {', '.join(map(str, mig_profile.placement_starts))})",
            )
            continue
        per_profile[mig_profile.name] = per_profile.get(mig_profile.name, 0) + count
        if per_profile[mig_profile.name] > mig_profile.instances:
            p.add(
                join(item_path, "count"),
                f"{per_profile[mig_profile.name]} x {mig_profile.name} exceed the profile's "
                f"{mig_profile.instances} instance{'s' if mig_profile.instances > 1 else ''} on a GPU",
            )
            continue
        if start is not None:
            fixed.append((mig_profile, start, item_path))
        else:
            free += [mig_profile] * count
    taken: dict[int, str] = {}  # memory slice → the item holding it
    for mig_profile, start, item_path in fixed:
        span = range(start, start + mig_profile.placement_size)
        clash = sorted({taken[s] for s in span if s in taken})
        if clash:
            p.add(
                join(item_path, "placement"),
                f"{mig_profile.name} at {start} uses memory slices {span.start}-{span.stop - 1}, "
                f"overlapping {', '.join(clash)}",
            )
        taken.update({s: item_path for s in span})
    if len(p.lines) > problems_before:
        return None
    starts = place([(mp.placement_starts, mp.placement_size) for mp in free], frozenset(taken))
    if starts is None:
        wanted = ", ".join(mp.name for mp in free)
        p.add(where, f"the MIG devices do not fit on one GPU: no free placements left for {wanted}")
        return None
    placed = [(mp, start) for mp, start, _ in fixed] + list(zip(free, starts, strict=True))
    return tuple(MigInstance(mp, start) for mp, start in sorted(placed, key=lambda ms: ms[1]))


def _memory(p: Problems, m: dict[str, Any], path: str) -> int | None:
    if "memory" not in m:
        return None
    value = m["memory"]
    try:
        memory = parse_quantity(value) if isinstance(value, str) else value
    except ValueError:
        memory = None
    if isinstance(value, str):
        shown = repr(shorten(value))
    else:  # as YAML gave it: an integer, or whatever else was written (shortened)
        shown = path_key(value) if isinstance(value, int) else shorten(repr(value))
    if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
        p.add(join(path, "memory"), f"must be a positive quantity like 23028Mi or 15Gi, got {shown}")
        return None
    if memory > MAX_GPU_MEMORY:
        p.add(join(path, "memory"), f"must be at most 1Ti (the largest GPU has 288 GB), got {shown}")
        return None
    return memory


def string_like(
    p: Problems, m: dict[str, Any], key: str, path: str, pattern: re.Pattern[str], form: str
) -> str | None:
    """The string `m[key]` when it matches `pattern`; else None, the problem (`form`: what it must look like)
    added to `p`."""
    value = p.string(m, key, path)
    if value is not None and not pattern.match(value):
        p.add(join(path, key), f'must look like {form}, got "{shorten(value)}"')
        return None
    return value


def _normalise_pci(value: str) -> str:
    """NVML's 00000000:3B:00.0 or 0000:3b:00.0 → 0000:3b:00.0, as go-nvlib's GetPCIBusID."""
    domain, bus, device, function = _PCI.match(value).groups()  # type: ignore[union-attr]  # validated
    return f"{domain}:{bus}:{device}.{function}".lower()
