"""End-to-end: the seed lab emulating NVIDIA's newest verified driver release (0.4.1), picked by the
inventory's `driverRelease:` on the real local cluster.

The session cluster runs the reference lab's release (25.12: examples/seed-lab.yaml says it; the default
is 0.5.0). The fixture writes `driverRelease: "0.4.1"` into the cluster's inventory and restarts both GPU
nodes' plugins (the release is read once at start); afterwards it restores the file, restarts them again
and deletes the slices, so the 25.12 plugins publish them under 25.12's names once more (a 25.12 plugin,
like libs 0.34, would keep a slice whose devices did not change).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.testing import FakepluginCluster, claim_pod
from tests.harness.kube import apply, get, wait_for
from tests.harness.seedlab import A5000, T10, cdi_file, our_slices, product_claim, running

pytestmark = pytest.mark.cluster

NODES = (T10, A5000)


def names_start_with(cluster: FakepluginCluster, prefix: str) -> list[dict[str, Any]] | None:
    """Our two slices, once each node has exactly one whose name starts with prefix.format(node=...)."""
    slices = our_slices(cluster)
    ok = len(slices) == 2 and all(
        s["metadata"]["name"].startswith(prefix.format(node=s["spec"]["nodeName"])) for s in slices
    )
    return slices if ok and {s["spec"]["nodeName"] for s in slices} == set(NODES) else None


@pytest.fixture
def release_0_4_1(cluster: FakepluginCluster) -> Iterator[None]:
    path, original = cluster.inventory, cluster.inventory.read_bytes()
    inventory = yaml.safe_load(original)
    inventory["driverRelease"] = "0.4.1"
    write_atomic(path, yaml.safe_dump(inventory, sort_keys=False).encode(), mode=0o644)
    try:
        for node in NODES:
            cluster.restart_plugin(node)
        yield
    finally:
        write_atomic(path, original, mode=0o644)
        for node in NODES:
            cluster.restart_plugin(node)
        for s in our_slices(cluster):
            cluster.kubectl("delete", "resourceslice", s["metadata"]["name"], "--wait=false")
        wait_for(
            lambda: names_start_with(cluster, "{node}-gpu.nvidia.com-"),
            what="the 25.12 plugins' slices again",
            timeout=120,
        )


def test_the_seed_lab_as_driver_0_4_1_publishes_its_slice_names_and_prepares_claims(
    cluster: FakepluginCluster, namespace: str, release_0_4_1: None
) -> None:
    slices = wait_for(
        lambda: names_start_with(cluster, "00000-gpu.nvidia.com-{node}-"),
        what="slices named as the 0.4.1 plugin (k8s libs 0.36) names them",
        timeout=120,
    )
    by_node = {s["spec"]["nodeName"]: s for s in slices}
    for node, s in by_node.items():
        assert s["spec"]["pool"] == {
            "name": node,
            "generation": s["spec"]["pool"]["generation"],
            "resourceSliceCount": 1,
        }
        assert s["metadata"]["ownerReferences"][0]["uid"] == get(cluster, "node", node)["metadata"]["uid"]
    (a5000,) = by_node[A5000]["spec"]["devices"]
    assert a5000["name"] == "gpu-0"
    assert a5000["attributes"]["productName"] == {"string": "NVIDIA RTX A5000"}
    assert a5000["capacity"] == {"memory": {"value": "23028Mi"}}

    apply(
        cluster,
        namespace,
        product_claim("a5000", "NVIDIA RTX A5000"),
        claim_pod("on-041", {"resourceClaimName": "a5000"}),
    )
    wait_for(lambda: running(cluster, namespace, "on-041"), what="pod on-041 Running", timeout=180)
    claim = get(cluster, "resourceclaim", "a5000", "-n", namespace)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["pool"], result["device"]) == (A5000, "gpu-0")
    spec = yaml.safe_load(cdi_file(cluster, A5000, claim["metadata"]["uid"]).read_text())
    assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
    assert [d["name"] for d in spec["devices"]] == [f"{claim['metadata']['uid']}-gpu-0"]
