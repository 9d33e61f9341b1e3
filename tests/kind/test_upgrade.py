"""`helm upgrade` from release 0.1.0 to this one while claims are prepared (docs/install.md, "Upgrading").

0.1.0 as its users have it (hack/kind/prior-release.sh): its chart packaged from git history (CHANGELOG.md:
0.1.0 is main at 52c2799), its image built from that commit's Dockerfile, installed with that commit's own
values files. A pod holding a GPU runs through the upgrade with its claim and CDI spec; the new plugin reads
the checkpoint 0.1.0 wrote (the claim's Unprepare, after its pod goes, finds it there: "unprepared claim …
(was PrepareCompleted)", and removes its CDI spec, which a plugin that did not know the claim would leave);
new claims are prepared by the new one.

The first module of the kind session (tests/kind/conftest.py: LAST): it ends with the release's chart
installed with the session's values, as run.sh installed it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fakeplugin.testing import device_request, resource_claim
from tests.harness.kind import CLUSTER as CLUSTER_NAME
from tests.harness.kind import (
    IMAGE,
    NAMESPACE,
    SHOW,
    T10,
    KindCluster,
    allocated_uuids,
    cdi_files,
    output,
    plugin_pods,
    registered,
    script_pod,
    send,
    smi_uuids,
    wait_ready,
)
from tests.harness.kind import KIND as KIND_BIN
from tests.harness.kube import wait_for
from tests.harness.paths import REPO

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

CHECKPOINT = "/var/lib/kubelet/plugins/gpu.nvidia.com/checkpoint.json"


@dataclass(frozen=True)
class OldRelease:
    image: str  # fakeplugin:0.1.0, what 0.1.0's chart runs by default
    chart: Path  # fakeplugin-0.1.0.tgz
    values: tuple[str, ...]  # helm's flags for 0.1.0's own lab values and kind inventory


@pytest.fixture(scope="module")
def old_release(kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> OldRelease:
    """0.1.0's image and chart, made from its commit (hack/kind/prior-release.sh), the image in the nodes."""
    out = kind_cluster.run(
        str(REPO / "hack/kind/prior-release.sh"), str(tmp_path_factory.mktemp("prior")), timeout=1800
    )
    made = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    nodes = ",".join(kind_cluster.gpu_nodes())  # where the plugin's DaemonSet runs
    kind_cluster.run(
        str(KIND_BIN), "load", "docker-image", "--name", CLUSTER_NAME, "--nodes", nodes, made["IMAGE"],
        timeout=600,
    )  # fmt: skip
    return OldRelease(
        made["IMAGE"],
        Path(made["CHART"]),
        ("-f", made["VALUES"], "--set-file", f"inventory={made['INVENTORY']}"),
    )


@pytest.fixture
def on_old_release(kind_cluster: KindCluster, old_release: OldRelease) -> Iterator[OldRelease]:
    """The session's release uninstalled, 0.1.0 installed in its place; after the test, the release's chart
    with the session's values again (run.sh's), whatever the test left."""
    kind = kind_cluster
    kind.helm("uninstall", "fakeplugin", "-n", NAMESPACE, "--wait", "--timeout=5m")
    try:
        kind.helm(
            "install", "fakeplugin", str(old_release.chart), "-n", NAMESPACE, *old_release.values,
            "--wait", "--timeout=5m",
        )  # fmt: skip
        kind.plugins_rolled_out()
        yield old_release
    finally:
        kind.helm(
            "upgrade", "--install", "fakeplugin", str(kind.chart), "-n", NAMESPACE,
            "-f", "examples/seed-lab-values.yaml", "--set-file", "inventory=demo/kind/inventory.yaml",
            "--wait", "--timeout=5m",
        )  # fmt: skip
        kind.plugins_rolled_out()


def plugin_images(kind: KindCluster) -> set[str]:
    return {c["image"] for p in plugin_pods(kind) for c in p["spec"]["containers"]}


def plugin_log(kind: KindCluster, node: str) -> str:
    (name,) = [p["metadata"]["name"] for p in plugin_pods(kind) if p["spec"].get("nodeName") == node]
    return kind.logs(NAMESPACE, name, "gpus")


def test_upgrade_from_0_1_0_keeps_prepared_claims_and_unprepares_them(
    kind_cluster: KindCluster, kind_namespace: str, on_old_release: OldRelease
) -> None:
    kind = kind_cluster
    assert plugin_images(kind) == {on_old_release.image}
    send(kind, kind_namespace, resource_claim("held", device_request(selector=T10)))
    send(kind, kind_namespace, script_pod("holder", "held", {"ctr": (SHOW, None)}))
    holder = wait_ready(kind, kind_namespace, "holder")
    node = holder["spec"]["nodeName"]
    (uuid,) = allocated_uuids(kind, kind_namespace, "held").values()
    assert smi_uuids(output(kind, kind_namespace, "holder")) == [uuid]
    held = kind.get("resourceclaim", "-n", kind_namespace, "held")
    uid = held["metadata"]["uid"]
    spec_file = f"k8s.gpu.nvidia.com-claim_{uid}.yaml"
    assert spec_file in cdi_files(kind, node)
    assert uid in kind.node_exec(node, "cat", CHECKPOINT)  # written by 0.1.0
    before = {p["metadata"]["uid"] for p in plugin_pods(kind)}

    # The user's values, unchanged: 0.1.0's files, to this release's packaged chart and its image.
    kind.helm(
        "upgrade", "fakeplugin", str(kind.chart), "-n", NAMESPACE, *on_old_release.values,
        "--wait", "--timeout=5m",
    )  # fmt: skip
    kind.plugins_rolled_out()
    wait_for(
        lambda: not before & {p["metadata"]["uid"] for p in plugin_pods(kind)},
        what="0.1.0's plugin pods gone",
        timeout=120,
    )
    assert plugin_images(kind) == {IMAGE}
    wait_for(lambda: len(registered(kind, node)) == 1, what=f"one registration socket on {node}")

    # The running pod kept its claim, its GPU and its CDI spec.
    holder = kind.get("pod", "-n", kind_namespace, "holder")
    assert holder["status"]["phase"] == "Running"
    assert holder["status"]["containerStatuses"][0]["restartCount"] == 0
    held = kind.get("resourceclaim", "-n", kind_namespace, "held")
    assert [r["name"] for r in held["status"]["reservedFor"]] == ["holder"]
    assert spec_file in cdi_files(kind, node)

    # A new claim is prepared by the new plugin, on another GPU.
    send(kind, kind_namespace, resource_claim("fresh", device_request(selector=T10)))
    send(kind, kind_namespace, script_pod("newcomer", "fresh", {"ctr": (SHOW, None)}))
    wait_ready(kind, kind_namespace, "newcomer")
    (fresh,) = allocated_uuids(kind, kind_namespace, "fresh").values()
    assert fresh != uuid
    assert smi_uuids(output(kind, kind_namespace, "newcomer")) == [fresh]

    # Unprepare by the new plugin of the claim 0.1.0 prepared: found in the checkpoint, its spec removed.
    kind.kubectl("delete", "pod", "-n", kind_namespace, "holder", "--wait", "--timeout=120s", timeout=130)
    wait_for(lambda: spec_file not in cdi_files(kind, node), what=f"{spec_file} removed on {node}")
    assert f"unprepared claim {kind_namespace}/held:{uid} (was PrepareCompleted)" in plugin_log(kind, node)
    assert uid not in kind.node_exec(node, "cat", CHECKPOINT)
    held = kind.get("resourceclaim", "-n", kind_namespace, "held")
    assert not held["status"].get("reservedFor")
