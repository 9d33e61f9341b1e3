"""The chart's fleet mode in kind (docs/chart-fleet.md): simulated GPU nodes beside the real ones, from the
chart alone. This module runs last (tests/kind/conftest.py), after test_kind.py uninstalled the chart: it
installs the chart again as demo/kind/run.sh does, plus examples/chart-fleet/values.yaml (the fleet, and
kwok's own controller in the image hack/kind/tool-image.sh builds from kwok's Go module), with the kind
lab's inventory and 100 simulated H100 nodes of 8 GPUs.

Checked: the fleet creates the 100 Nodes (the entry's labels, kwok's annotation, owned by the fleet's
ClusterRole) and kwok makes them Ready beside the kind nodes; each publishes its slice of 8 H100s;
examples/chart-fleet/claims.yaml's pods run there, each only once the fleet prepared its claim (the pod's
annotation, the CDI spec in the fleet pod's files), and their deletion unprepares; the fleet's RBAC is
enough (no refusal in its log); `helm uninstall` leaves no simulated Node, slice or pod behind.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.harness.kind import CLUSTER as CLUSTER_NAME
from tests.harness.kind import KIND as KIND_BIN
from tests.harness.kind import NAMESPACE, KindCluster
from tests.harness.kube import wait_for
from tests.harness.paths import REPO

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

RELEASE = "fakeplugin"
NODES = 100
OWNER = f"{NAMESPACE}.{RELEASE}"  # the chart's fakeplugin.dev/fleet value
FLEET = f"{RELEASE}-fleet"
WORKLOADS = "sim"
PODS = 10  # examples/chart-fleet/claims.yaml
STATE = "/var/lib/fakeplugin-fleet"


def simulated(kind: KindCluster) -> list[dict[str, Any]]:
    return kind.get("nodes", "-l", f"fakeplugin.dev/fleet={OWNER}")["items"]


def ready(node: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
    )


def simulated_slices(kind: KindCluster) -> list[dict[str, Any]]:
    return [
        s
        for s in kind.get("resourceslices")["items"]
        if s["spec"]["driver"] == "gpu.nvidia.com" and s["spec"].get("nodeName", "").startswith("h100-")
    ]


def pods_on_simulated_nodes(kind: KindCluster) -> list[str]:
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in kind.get("pods", "-A")["items"]
        if p["spec"].get("nodeName", "").startswith("h100-")
    ]


def fleet_files(kind: KindCluster, node: str) -> list[str]:
    out = kind.kubectl("exec", "-n", NAMESPACE, f"deploy/{FLEET}-0", "--", "ls", f"{STATE}/nodes/{node}/cdi")
    return out.stdout.split()


@pytest.fixture(scope="module")
def fleet_release(
    kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KindCluster]:
    kind = kind_cluster
    out = kind.run(str(REPO / "hack/kind/tool-image.sh"), "kwok", timeout=600)
    kwok_image = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["KWOK_IMAGE"]
    kind.run(str(KIND_BIN), "load", "docker-image", "--name", CLUSTER_NAME, kwok_image, timeout=600)
    # The kind lab's entries (demo/kind/inventory.yaml) and the example's simulated ones, 100 of them.
    inventory = yaml.safe_load((REPO / "demo/kind/inventory.yaml").read_text())
    example = yaml.safe_load((REPO / "examples/chart-fleet/values.yaml").read_text())
    [entry] = example["inventory"]["nodes"]
    inventory["nodes"].append({**entry, "replicas": NODES})
    path = tmp_path_factory.mktemp("chart-fleet") / "inventory.yaml"
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    repository, tag = kwok_image.rsplit(":", 1)
    kind.helm(
        "upgrade",
        "--install",
        RELEASE,
        str(kind.chart),
        "-n",
        NAMESPACE,
        "--create-namespace",
        "-f",
        "examples/seed-lab-values.yaml",
        "-f",
        "examples/chart-fleet/values.yaml",
        "--set-file",
        f"inventory={path}",
        "--set",
        f"fleet.kwok.image.repository={repository},fleet.kwok.image.tag={tag}",
        "--wait",
        "--timeout=5m",
    )
    try:
        yield kind
    finally:
        kind.kubectl(
            "delete", "namespace", WORKLOADS, "--ignore-not-found", "--wait", "--timeout=180s", timeout=200
        )
        kind.run(
            "helm",
            f"--kubeconfig={kind.kubeconfig}",
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
            "--ignore-not-found",
        )


def test_the_fleet_creates_its_nodes_beside_the_kind_nodes(fleet_release: KindCluster) -> None:
    kind = fleet_release

    def all_ready() -> list[dict[str, Any]] | None:
        found = simulated(kind)
        return found if len(found) == NODES and all(ready(n) for n in found) else None

    nodes = wait_for(all_ready, what=f"{NODES} simulated Nodes Ready", timeout=300)
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(f"h100-{i}" for i in range(NODES))
    meta = nodes[0]["metadata"]
    assert meta["labels"]["gpu-type"] == "h100" and meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("ClusterRole", FLEET)
    assert owner["uid"] == kind.get("clusterrole", FLEET)["metadata"]["uid"]
    assert kind.gpu_nodes(), "the kind GPU workers are still there"

    def published() -> list[dict[str, Any]] | None:
        found = simulated_slices(kind)
        return found if len(found) == NODES else None

    slices = wait_for(published, what=f"{NODES} slices of the simulated nodes", timeout=300)
    for s in slices:
        devices = s["spec"]["devices"]
        assert len(devices) == 8, s["metadata"]["name"]
        assert {d["attributes"]["productName"]["string"] for d in devices} == {"NVIDIA H100 80GB HBM3"}
        assert s["metadata"]["ownerReferences"][0]["kind"] == "Node"


def test_claim_pods_run_on_simulated_nodes_only_after_prepare(fleet_release: KindCluster) -> None:
    kind = fleet_release
    kind.kubectl("create", "namespace", WORKLOADS)
    kind.kubectl("apply", "-n", WORKLOADS, "-f", str(REPO / "examples/chart-fleet/claims.yaml"))

    def running() -> list[dict[str, Any]] | None:
        pods = kind.get("pods", "-n", WORKLOADS)["items"]
        ok = [p for p in pods if p["status"].get("phase") == "Running"]
        return ok if len(ok) == PODS else None

    pods = wait_for(running, what=f"{PODS} claim pods Running", timeout=300)
    claims = {c["metadata"]["name"]: c for c in kind.get("resourceclaims", "-n", WORKLOADS)["items"]}
    for p in pods:
        node = p["spec"]["nodeName"]
        assert node.startswith("h100-"), p["metadata"]["name"]
        assert p["metadata"]["annotations"]["fakeplugin.dev/prepared"] == "true"
        [status] = p["status"]["resourceClaimStatuses"]
        claim = claims[status["resourceClaimName"]]
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["pool"] == node
        uid = claim["metadata"]["uid"]
        assert [f for f in fleet_files(kind, node) if uid in f], f"no CDI spec of claim {uid} on {node}"
    log = kind.kubectl("logs", "-n", NAMESPACE, f"deploy/{FLEET}-0").stdout
    assert "Forbidden" not in log and " 403" not in log, log[-3000:]

    used = {p["spec"]["nodeName"] for p in pods}
    kind.kubectl(
        "delete", "-n", WORKLOADS, "-f", str(REPO / "examples/chart-fleet/claims.yaml"), "--wait", timeout=200
    )
    wait_for(lambda: not kind.get("pods", "-n", WORKLOADS)["items"], what="the claim pods gone", timeout=180)
    for node in used:
        wait_for(
            lambda n=node: not [f for f in fleet_files(kind, n) if "claim_" in f],
            what=f"the claims' CDI specs removed on {node}",
        )


def test_uninstall_leaves_no_simulated_node_slice_or_pod(fleet_release: KindCluster) -> None:
    kind = fleet_release
    kind.kubectl(
        "delete", "namespace", WORKLOADS, "--ignore-not-found", "--wait", "--timeout=180s", timeout=200
    )
    kind.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout=5m")
    wait_for(lambda: not simulated(kind), what="the simulated Nodes deleted (garbage collector)", timeout=300)
    wait_for(lambda: not simulated_slices(kind), what="their ResourceSlices deleted", timeout=300)
    wait_for(lambda: not pods_on_simulated_nodes(kind), what="no pod left on a simulated node", timeout=300)
    left = kind.kubectl("get", "deploy,clusterrole,clusterrolebinding,configmap", "-A", "-o", "json").stdout
    names = [o["metadata"]["name"] for o in json.loads(left)["items"]]
    assert not [n for n in names if n.startswith((FLEET, f"{RELEASE}-kwok"))], names


def test_every_node_left_is_a_kind_node(fleet_release: KindCluster) -> None:
    kind = fleet_release
    names = [n["metadata"]["name"] for n in kind.get("nodes")["items"]]
    assert names and all(n.startswith(CLUSTER_NAME) for n in names), names
