"""ComputeDomains on kind: the chart with `resources.computeDomains.enabled=true` (CRDs, classes, the
controller Deployment, the plugin DaemonSet's `compute-domains` container) and NVIDIA's own demo specs
(tests/data/nvidia-demo-specs, applied unchanged) through the kind nodes' real containerd and runc: the
channel claim's CDI device nodes made by runc in the workload's container (what its `ls -la
/dev/nvidia-caps-imex-channels` prints), the daemon the controller's DaemonSet starts running
`fakeplugin compute-domain-daemon run` in a real container whose exec probes make it Ready, the
ComputeDomain Ready with the node in status.nodes, and after the workload's deletion the node gone from
it and the single-node ComputeDomain NotReady (NVIDIA's tests/bats/test_cd_imex_chan_inject.bats and
test_cd_misc.bats "daemon shutdown: confirm CD status cleanup").

The session's cluster and release are reused: the module's fixture upgrades the release with the
ComputeDomain side and an inventory giving both GPU workers four GB200 in NVLink clique 1, and rolls it
back afterwards; the module runs before tests/kind/test_kind.py (tests/kind/conftest.py runs that one
last), which then finds the release as run.sh installed it and uninstalls it last. Each node publishes one
`channel-0`, so NVIDIA's two specs, applied together, get one node each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.cdispec import IMEX_CHANNELS_MAJOR
from tests.harness.domains import SPECS
from tests.harness.kind import CLUSTER as CLUSTER_NAME
from tests.harness.kind import DAEMONSET, NAMESPACE, KindCluster, plugin_pods
from tests.harness.kind import KIND as KIND_BIN
from tests.harness.kube import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.timeout(1800)]

WORKLOAD_NAMESPACE = "cd-kind"
CLUSTER_UUID = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
CLIQUE_ID = f"{CLUSTER_UUID}.1"
# What NVIDIA's specs run: the kind nodes cannot pull it, so the local Debian base (run.sh --local loads
# it; it has bash and ls) is loaded under that name for this module.
SPEC_IMAGE = "ubuntu:22.04"
WORKLOAD_IMAGE = "fakeplugin.local/debian:bookworm"
CONTROLLER = "fakeplugin-controller"
BASE_SPEC = f"k8s.{api.DRIVER_NAME}-device_base.yaml"  # the plugin's standard spec, left as NVIDIA's is
# NVIDIA's spec -> the last channel its pod gets (allocationMode Single: channel0; All: 0..2047)
DEMOS = {"channel-injection.yaml": 0, "channel-injection-all.yaml": 2047}


def inventory(nodes: list[str]) -> dict[str, Any]:
    return {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [
            {
                "name": node,
                "gpus": [{"profile": "gb200", "count": 4}],
                "fabric": {"clique": 1, "clusterUUID": CLUSTER_UUID},
            }
            for node in nodes
        ],
    }


def rolled_out(kind: KindCluster, before: set[str], containers: list[str]) -> None:
    """The plugin DaemonSet rolled: none of the pods `before` left, every pod with `containers`, ready."""
    kind.kubectl(
        "rollout", "status", "-n", NAMESPACE, f"daemonset/{DAEMONSET}", "--timeout=300s", timeout=320
    )

    def replaced() -> list[dict[str, Any]] | None:
        pods = plugin_pods(kind)
        if before & {p["metadata"]["uid"] for p in pods}:
            return None
        ready = all(
            [c["name"] for c in p["spec"]["containers"]] == containers
            and all(s["ready"] for s in p["status"].get("containerStatuses", []))
            for p in pods
        )
        return pods if ready and len(pods) == len(kind.gpu_nodes()) else None

    wait_for(replaced, what=f"plugin pods with containers {containers}, the old ones gone", timeout=180)


def slices(kind: KindCluster, driver: str) -> dict[str, list[str]]:
    """node -> its devices published by `driver`."""
    out: dict[str, list[str]] = {}
    for s in kind.get("resourceslices")["items"]:
        if s["spec"]["driver"] == driver:
            out.setdefault(s["spec"]["nodeName"], []).extend(d["name"] for d in s["spec"].get("devices", []))
    return {node: sorted(devices) for node, devices in out.items()}


def gpu_devices(kind: KindCluster) -> set[tuple[str, str, str]]:
    return {
        (s["spec"]["nodeName"], d["name"], d["attributes"]["productName"]["string"])
        for s in kind.get("resourceslices")["items"]
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"].get("devices", [])
    }


@pytest.fixture(scope="module")
def compute_domains(
    kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[str]]:
    """The release upgraded with the ComputeDomain side and a GB200 inventory; rolled back after."""
    kind = kind_cluster
    nodes = kind.gpu_nodes()
    revision = json.loads(kind.helm("status", "fakeplugin", "-n", NAMESPACE, "-o", "json"))["version"]
    devices_before = gpu_devices(kind)
    pods_before = {p["metadata"]["uid"] for p in plugin_pods(kind)}
    path = tmp_path_factory.mktemp("cd") / "gb200.yaml"
    path.write_text(yaml.safe_dump(inventory(nodes), sort_keys=False))

    kind.run("docker", "tag", WORKLOAD_IMAGE, SPEC_IMAGE)
    try:
        kind.run(str(KIND_BIN), "load", "docker-image", "--name", CLUSTER_NAME, SPEC_IMAGE)
    finally:
        kind.run("docker", "rmi", SPEC_IMAGE)  # the tag only: the image keeps its own name
    try:
        kind.upgrade_chart(
            "--set", "resources.computeDomains.enabled=true", "--set-file", f"inventory={path}"
        )
        rolled_out(kind, pods_before, ["gpus", "compute-domains"])
        kind.kubectl(
            "rollout", "status", "-n", NAMESPACE, f"deployment/{CONTROLLER}", "--timeout=180s", timeout=200
        )
        want = {node: ["channel-0", "daemon-0"] for node in nodes}
        wait_for(lambda: slices(kind, api.DRIVER_NAME) == want, what=f"{api.DRIVER_NAME} slices {want}")
        kind.kubectl("create", "namespace", WORKLOAD_NAMESPACE)
        yield nodes
    finally:
        kind.kubectl(
            "delete",
            "namespace",
            WORKLOAD_NAMESPACE,
            "--ignore-not-found",
            "--wait",
            "--timeout=180s",
            timeout=200,
        )
        pods_cd = {p["metadata"]["uid"] for p in plugin_pods(kind)}
        kind.helm("rollback", "fakeplugin", str(revision), "-n", NAMESPACE, "--wait", "--timeout=5m")
        rolled_out(kind, pods_cd, ["gpus"])
        # The controller's Lease: Helm does not own it, and the rollback deletes the controller's RBAC while
        # its pod stops, so the controller (which releases it at SIGTERM) left it held.
        kind.kubectl("delete", "lease", "-n", NAMESPACE, CONTROLLER, "--ignore-not-found")
        wait_for(lambda: gpu_devices(kind) == devices_before, what="the session's GPUs published again")
        # The kubelet removes a driver's slices some time after its plugin unregistered.
        wait_for(
            lambda: not slices(kind, api.DRIVER_NAME), what=f"no {api.DRIVER_NAME} slices left", timeout=180
        )
        for node in nodes:
            kind.node_exec(node, "rm", "-f", f"/var/run/cdi/{BASE_SPEC}")
            # The name only (crictl rmi would remove every name of the image, the Debian base's too).
            kind.node_exec(node, "ctr", "-n", "k8s.io", "images", "rm", f"docker.io/library/{SPEC_IMAGE}")


def cd_status(kind: KindCluster, name: str) -> dict[str, Any]:
    return kind.get("computedomain", "-n", WORKLOAD_NAMESPACE, name).get("status") or {}


def cd_uid(kind: KindCluster, name: str) -> str:
    return kind.get("computedomain", "-n", WORKLOAD_NAMESPACE, name)["metadata"]["uid"]


def daemon_pods(kind: KindCluster, uid: str) -> list[dict[str, Any]]:
    return kind.get("pods", "-n", NAMESPACE, "-l", f"{api.COMPUTE_DOMAIN_LABEL}={uid}")["items"]


def channels(log: str) -> dict[str, tuple[str, int, int]]:
    """The character devices `ls -la` listed: name -> (mode, major, minor)."""
    return {
        m["name"]: (m["mode"], int(m["major"]), int(m["minor"]))
        for m in re.finditer(
            r"^(?P<mode>c[-rwxsStT]{9})\S*\s+\d+\s+\S+\s+\S+\s+(?P<major>\d+),\s*(?P<minor>\d+)\s.*\s(?P<name>\S+)$",
            log,
            re.M,
        )
    }


def listing(kind: KindCluster, pod_name: str) -> str:
    """What the spec's container printed: `ls -la /dev/nvidia-caps-imex-channels` (its first line `total`)."""

    def printed() -> str | None:
        log = kind.kubectl("logs", "-n", WORKLOAD_NAMESPACE, pod_name, "-c", "ctr", check=False).stdout
        return log if log.startswith("total ") else None

    return wait_for(printed, what=f"{pod_name}'s ls -la output")


def test_nvidias_channel_injection_specs_through_real_containerd(
    kind_cluster: KindCluster, compute_domains: list[str]
) -> None:
    kind = kind_cluster
    demos = []  # (ComputeDomain, its pod, the last channel the pod gets)
    for spec, last in DEMOS.items():
        kind.kubectl("apply", "-n", WORKLOAD_NAMESPACE, "-f", str(SPECS / spec))
        cd, workload = [d for d in yaml.safe_load_all((SPECS / spec).read_text()) if d]
        demos.append((cd["metadata"]["name"], workload["metadata"]["name"], last))

    # A channel claim's first Prepare fails (its node's daemon is not Ready yet); the kubelet retries it.
    node_of = {}
    for name, pod_name, last in demos:
        kind.kubectl(
            "wait",
            "-n",
            WORKLOAD_NAMESPACE,
            f"pod/{pod_name}",
            "--for=condition=Ready",
            "--timeout=300s",
            timeout=320,
        )
        node = node_of[name] = kind.get("pod", "-n", WORKLOAD_NAMESPACE, pod_name)["spec"]["nodeName"]
        log = listing(kind, pod_name)
        want = {f"channel{i}": ("crw-rw-rw-", IMEX_CHANNELS_MAJOR, i) for i in range(last + 1)}
        assert channels(log) == want, log[:3000]

        status = wait_for(
            lambda n=name: (s := cd_status(kind, n)).get("status") == api.STATUS_READY and s,
            what=f"ComputeDomain {name} Ready",
            timeout=60,
        )
        (entry,) = status["nodes"]
        assert (entry["name"], entry["cliqueID"], entry["status"]) == (node, CLIQUE_ID, "Ready"), status

        # Its daemon: the controller's DaemonSet's pod on that node, a real container, Ready through its exec
        # probes (`compute-domain-daemon check`), its entry in the clique with its own pod's IP.
        uid = cd_uid(kind, name)
        (daemon,) = daemon_pods(kind, uid)
        assert daemon["spec"]["nodeName"] == node
        assert daemon["metadata"]["labels"][api.CLIQUE_ID_LABEL] == CLIQUE_ID
        (ctr,) = daemon["status"]["containerStatuses"]
        assert ctr["ready"] and ctr["started"] and ctr["restartCount"] == 0, ctr
        assert ctr["containerID"].startswith("containerd://"), ctr
        clique_name = api.clique_name(uid, CLIQUE_ID)
        clique = kind.get("computedomainclique", "-n", NAMESPACE, clique_name)
        assert [(d["nodeName"], d["ipAddress"], d["index"], d["status"]) for d in clique["daemons"]] == [
            (node, daemon["status"]["podIP"], 0, "Ready")
        ], clique
        daemon_log = kind.logs(NAMESPACE, daemon["metadata"]["name"], "compute-domain-daemon")
        assert f"Successfully created CDClique '{clique_name}'" in daemon_log, daemon_log
    assert sorted(node_of.values()) == compute_domains  # one channel-0 per node: one spec each

    # A workload goes: its channel claim is unprepared, the node label removed, the daemon pod stopped; its
    # SIGTERM removes its entry, and the single-node ComputeDomain turns NotReady.
    for name, pod_name, _ in demos:
        node, uid = node_of[name], cd_uid(kind, name)
        kind.kubectl(
            "delete", "pod", "-n", WORKLOAD_NAMESPACE, pod_name, "--wait", "--timeout=120s", timeout=130
        )
        wait_for(
            lambda n=name: (
                "nodes" not in (s := cd_status(kind, n)) and s.get("status") == api.STATUS_NOT_READY
            ),
            what=f"node {node} gone from ComputeDomain {name}'s status, NotReady",
            timeout=120,
        )
        assert api.COMPUTE_DOMAIN_LABEL not in kind.get("node", node)["metadata"]["labels"]
        wait_for(lambda u=uid: not daemon_pods(kind, u), what=f"ComputeDomain {name}'s daemon pod gone")
    for name, _, _ in demos:
        kind.kubectl(
            "delete", "computedomain", "-n", WORKLOAD_NAMESPACE, name, "--wait", "--timeout=120s", timeout=130
        )
    # Nothing of either ComputeDomain is left in the driver's namespace, and of the plugin's CDI specs only
    # its standard one (NVIDIA's plugin leaves it too; the fixture removes it).
    wait_for(
        lambda: (
            not kind.get("daemonsets", "-n", NAMESPACE, "-l", api.COMPUTE_DOMAIN_LABEL)["items"]
            and not kind.get("resourceclaimtemplates", "-n", NAMESPACE)["items"]
        ),
        what="the daemon DaemonSets and claim templates deleted",
        timeout=60,
    )
    for node in compute_domains:
        names = kind.node_exec(node, "ls", "/var/run/cdi").split()
        assert [n for n in names if api.DRIVER_NAME in n] == [BASE_SPEC], (node, names)
