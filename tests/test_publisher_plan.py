"""The pure pool-reconciliation rules of runtime.publisher.plan (upstream resourceslice controller)."""

from __future__ import annotations

from typing import Any

from fakeplugin import releases
from fakeplugin.runtime.publisher import brief, plan

NODE = "node-a"
# Release 25.12 (k8s libs 0.34), the slices named `<node>-<driver>-`: slices match by their devices. The
# default release (0.5.0) matches by index, as 0.4.1 below.
V25_12 = releases.get("25.12")


def desired(*device_sets: list[str], mem: str = "15Gi") -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "generateName": f"{NODE}-gpu.nvidia.com-",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "u1", "controller": True}
                ],
            },
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": NODE,
                "pool": {"name": NODE, "generation": 0, "resourceSliceCount": len(device_sets)},
                "devices": [{"name": n, "capacity": {"memory": {"value": mem}}} for n in names],
            },
        }
        for names in device_sets
    ]


def stored(objs: list[dict[str, Any]], generation: int, pool: str = NODE) -> list[dict[str, Any]]:
    out = []
    for i, obj in enumerate(objs):
        copy = {
            **obj,
            "metadata": {
                **obj["metadata"],
                "name": f"s{i}",
                "uid": f"uid{i}",
                "resourceVersion": "7",
                "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
            },
            "spec": {**obj["spec"], "pool": {**obj["spec"]["pool"], "generation": generation, "name": pool}},
        }
        out.append(copy)
    return out


def test_first_publish_creates_with_generation_one():
    p = plan([], desired(["gpu-0", "gpu-1"]), pool_name=NODE, release=V25_12)
    assert p.generation == 1
    assert [c["spec"]["pool"]["generation"] for c in p.creates] == [1]
    assert not p.updates and not p.deletes


def test_unchanged_pool_needs_no_writes():
    want = desired(["gpu-0", "gpu-1"])
    p = plan(stored(want, 1), want, pool_name=NODE, release=V25_12)
    assert p.empty and p.generation == 1


def test_brief_slices_with_their_digests_plan_as_the_whole_slices_do():
    """A resync holds the driver's existing slices brief (devices by name, a digest of the content)."""
    want = desired(["gpu-0"], ["gpu-1"])
    contents: dict[str, str] = {}
    have = [brief(s, contents) for s in stored(want, 2)]
    assert have[0]["spec"]["devices"] == [{"name": "gpu-0"}] and set(contents) == {"s0", "s1"}
    assert plan(have, want, pool_name=NODE, release=V25_12, contents=contents).empty

    changed = desired(["gpu-0"], ["gpu-1"], mem="16Gi")
    p = plan(have, changed, pool_name=NODE, release=V25_12, contents=contents)
    whole = plan(stored(want, 2), changed, pool_name=NODE, release=V25_12)
    assert p == whole and p.generation == 3
    assert [u["metadata"]["name"] for u in p.updates] == ["s0", "s1"]
    assert p.updates[0]["spec"]["devices"] == [{"name": "gpu-0", "capacity": {"memory": {"value": "16Gi"}}}]


def test_single_slice_change_updates_in_place_and_keeps_generation():
    have = stored(desired(["gpu-0"]), 3)
    p = plan(have, desired(["gpu-0", "gpu-1"]), pool_name=NODE, release=V25_12)
    assert p.generation == 3
    assert len(p.updates) == 1 and not p.creates and not p.deletes
    assert p.updates[0]["metadata"]["name"] == "s0"
    assert p.updates[0]["metadata"]["resourceVersion"] == "7"
    assert [d["name"] for d in p.updates[0]["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_duplicates_after_restart_are_deleted_and_generation_bumped():
    want = desired(["gpu-0"])
    have = stored(want + want, 1)  # two identical slices, e.g. from a crash between create and record
    p = plan(have, want, pool_name=NODE, release=V25_12)
    assert [d["metadata"]["name"] for d in p.deletes] == ["s1"]
    assert p.generation == 2
    assert p.updates and p.updates[0]["spec"]["pool"]["generation"] == 2


def test_split_pool_growth_bumps_generation_everywhere():
    have = stored(desired(["gpu-0"], ["gpu-1"]), 4)
    want = desired(["gpu-0"], ["gpu-1"], ["gpu-2"])
    p = plan(have, want, pool_name=NODE, release=V25_12)
    assert p.generation == 5
    assert len(p.creates) == 1 and p.creates[0]["spec"]["pool"]["resourceSliceCount"] == 3
    assert sorted(u["metadata"]["name"] for u in p.updates) == ["s0", "s1"]
    assert all(u["spec"]["pool"]["generation"] == 5 for u in p.updates)


def test_foreign_pool_slices_are_removed():
    want = desired(["gpu-0"])
    have = stored(want, 1, pool="old-pool")
    p = plan(have, want, pool_name=NODE, release=V25_12)
    assert [d["spec"]["pool"]["name"] for d in p.deletes] == ["old-pool"]
    assert len(p.creates) == 1


def test_empty_desired_deletes_everything():
    have = stored(desired(["gpu-0"], ["gpu-1"]), 2)
    p = plan(have, [], pool_name=NODE, release=V25_12)
    assert len(p.deletes) == 2 and not p.creates and not p.updates


# Release 0.4.1 (k8s libs 0.36): slices match by the index their name starts with.
V0_4_1 = releases.get("0.4.1")


def indexed(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**o, "metadata": {**o["metadata"], "generateName": f"{i:05x}-gpu.nvidia.com-{NODE}-"}}
        for i, o in enumerate(objs)
    ]


def named(objs: list[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    return [{**o, "metadata": {**o["metadata"], "name": n}} for o, n in zip(objs, names, strict=True)]


def test_0_4_1_replaces_a_slice_named_by_an_older_release():
    want = indexed(desired(["gpu-0"]))
    have = named(stored(desired(["gpu-0"]), 1), f"{NODE}-gpu.nvidia.com-abcde")
    p = plan(have, want, pool_name=NODE, release=V0_4_1)
    assert [d["metadata"]["name"] for d in p.deletes] == [f"{NODE}-gpu.nvidia.com-abcde"]
    assert [c["metadata"]["generateName"] for c in p.creates] == [f"00000-gpu.nvidia.com-{NODE}-"]
    assert p.generation == 2 and not p.updates


def test_0_4_1_matches_by_index_not_by_devices():
    want = indexed(desired(["gpu-0"], ["gpu-1"]))
    have = named(
        stored(desired(["gpu-1"], ["gpu-0"], ["gpu-2"]), 3),
        f"00001-gpu.nvidia.com-{NODE}-x",
        f"00000-gpu.nvidia.com-{NODE}-y",
        f"00002-gpu.nvidia.com-{NODE}-z",
    )
    p = plan(have, want, pool_name=NODE, release=V0_4_1)
    assert not p.creates
    assert [d["metadata"]["name"] for d in p.deletes] == [f"00002-gpu.nvidia.com-{NODE}-z"]
    assert {u["metadata"]["name"]: [d["name"] for d in u["spec"]["devices"]] for u in p.updates} == {
        f"00001-gpu.nvidia.com-{NODE}-x": ["gpu-1"],
        f"00000-gpu.nvidia.com-{NODE}-y": ["gpu-0"],
    }


def test_0_4_1_keeps_an_unchanged_indexed_slice():
    want = indexed(desired(["gpu-0"]))
    have = named(stored(want, 1), f"00000-gpu.nvidia.com-{NODE}-q7x2k")
    assert plan(have, want, pool_name=NODE, release=V0_4_1).empty
