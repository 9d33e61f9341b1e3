"""Hot inventory changes: the session cluster's plugins re-read their inventory file (every
INVENTORY_POLL_SECONDS) and publish added or removed GPUs in place, without a restart.

The session cluster is shared: the file is restored at the end, and the test waits until the slices
are the original ones again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.runtime.nodes import INVENTORY_POLL_SECONDS
from fakeplugin.testing import FakepluginCluster
from tests.e2e.kube import claim_pod, resource_claim, wait_for
from tests.e2e.test_dra import A5000, our_slices

pytestmark = pytest.mark.cluster

NEW_UUID = "GPU-0d0d0d0d-1111-4222-8333-444444444444"
WITHIN = 6 * INVENTORY_POLL_SECONDS  # a poll, the publisher's update, the API server: a few seconds


def published(cluster: FakepluginCluster) -> dict[str, dict[str, str]]:
    """Node → device name → UUID, as the ResourceSlices show them."""
    return {
        s["spec"]["nodeName"]: {d["name"]: d["attributes"]["uuid"]["string"] for d in s["spec"]["devices"]}
        for s in our_slices(cluster)
    }


def write(path: Path, inventory: dict[str, Any]) -> None:
    """Atomically, as a ConfigMap update swaps the file: the plugin never reads half of it."""
    write_atomic(path, yaml.safe_dump(inventory, sort_keys=False).encode(), mode=0o644)


@pytest.fixture
def inventory(cluster: FakepluginCluster) -> Iterator[dict[str, Any]]:
    """The session cluster's inventory as data; file and slices restored afterwards."""
    path, original, before = cluster.inventory, cluster.inventory.read_bytes(), published(cluster)
    try:
        yield yaml.safe_load(original)
    finally:
        write_atomic(path, original, mode=0o644)
        wait_for(lambda: published(cluster) == before, what="the original slices again", timeout=WITHIN)


def test_a_gpu_added_to_the_inventory_is_allocatable_and_removed_again_without_a_restart(
    cluster: FakepluginCluster, namespace: str, inventory: dict[str, Any]
) -> None:
    plugin_pids = {p.name: p.pid for p in cluster.local.status() if p.name.startswith("plugin/")}
    before = published(cluster)
    (entry,) = [n for n in inventory["nodes"] if n.get("name") == A5000]
    entry["gpus"].append({"profile": "t4", "uuid": NEW_UUID})
    write(cluster.inventory, inventory)

    wait_for(
        lambda: published(cluster)[A5000].get("gpu-1") == NEW_UUID, what="gpu-1 published", timeout=WITHIN
    )
    assert published(cluster) == {**before, A5000: {**before[A5000], "gpu-1": NEW_UUID}}

    by_uuid = {"cel": {"expression": f'device.attributes["gpu.nvidia.com"].uuid == "{NEW_UUID}"'}}
    claim = resource_claim("new-gpu", {"deviceClassName": "gpu.nvidia.com", "selectors": [by_uuid]})
    cluster.apply([claim, claim_pod("on-new", {"resourceClaimName": "new-gpu"})], namespace)
    cluster.wait_for_pod(namespace, "on-new")
    assert cluster.allocation(namespace, "new-gpu") == [(A5000, A5000, "gpu-1", "gpu")]
    smi = cluster.container(namespace, "on-new", "ctr").run("nvidia-smi -L")
    assert smi.stdout.splitlines() == [f"GPU 0: Tesla T4 (UUID: {NEW_UUID})"], smi.stderr

    # Removed while prepared for a running pod: gone from the slice at once; the claim's unprepare
    # still works (it needs only the checkpoint).
    entry["gpus"].pop()
    write(cluster.inventory, inventory)
    wait_for(lambda: published(cluster) == before, what="gpu-1 gone from the slice", timeout=WITHIN)
    cluster.delete(claim_pod("on-new", {}), namespace)
    (unprepared,) = wait_for(
        lambda: cluster.calls(A5000, claim=f"{namespace}/new-gpu", method="NodeUnprepareResources"),
        what="the claim's NodeUnprepareResources",
    )
    assert unprepared["result"] == "ok"
    assert {p.name: p.pid for p in cluster.local.status() if p.name.startswith("plugin/")} == plugin_pids
