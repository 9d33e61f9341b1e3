"""fakeplugin.testing on the session cluster: the documented example run through the pytest11 entry
point, attached to this cluster (it must start and stop nothing), and the API's calls one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakeplugin.cluster import binaries
from fakeplugin.testing import FakepluginCluster, FakepluginUnavailable, claim_pod, faults
from tests.harness.seedlab import A5000, product_claim

pytestmark = pytest.mark.cluster
pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "test_gpu_workload.py"


@pytest.fixture(scope="session")
def kubectl_binary() -> Path:
    """Found before pytester moves HOME (and with it the default binary cache) for its test."""
    return binaries.find("kubectl")


def test_the_documented_example_passes_attached_to_the_session_cluster(
    cluster: FakepluginCluster,
    kubectl_binary: Path,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TEST_ASSET_KUBECTL", str(kubectl_binary))
    namespaces_before = {n["metadata"]["name"] for n in cluster.get("namespaces")["items"]}
    pytester.makepyfile(test_gpu_workload=EXAMPLE.read_text())
    result = pytester.runpytest_subprocess(
        f"--fakeplugin-kubeconfig={cluster.kubeconfig}", f"--fakeplugin-state-dir={cluster.layout.root}"
    )
    result.assert_outcomes(passed=2)
    assert all(p.running for p in cluster.local.status()), "an attached session stops nothing"
    created = {n["metadata"]["name"] for n in cluster.get("namespaces")["items"]} - namespaces_before
    for ns in created:  # fakeplugin_namespace deleted each test's namespace
        assert cluster.get("namespace", ns)["status"]["phase"] == "Terminating"
    assert len(created) <= 2


def test_api_on_a_pods_claim(cluster: FakepluginCluster, namespace: str) -> None:
    objs = [product_claim("a5000", "NVIDIA RTX A5000"), claim_pod("p", {"resourceClaimName": "a5000"})]
    sent = cluster.apply(objs, namespace)
    assert [o["kind"] for o in sent] == ["ResourceClaim", "Pod"]
    pod = cluster.wait_for_pod(namespace, "p")
    assert pod["spec"]["nodeName"] == A5000

    assert cluster.allocation(namespace, "a5000") == [(A5000, A5000, "gpu-0", "gpu")]
    ctr = cluster.container(namespace, "p", "ctr")
    uid = cluster.get("resourceclaim", "a5000", namespace)["metadata"]["uid"]
    assert ctr.cdi_devices == [f"k8s.gpu.nvidia.com/claim={uid}-gpu-0"]
    assert ctr.gpus == {"gpu-0": ctr.env["FAKEPLUGIN_GPU_0_UUID"]}
    assert ctr.env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "/usr/bin/nvidia-smi" in {m["destination"] for m in ctr.mounts}
    query = ctr.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    assert (query.returncode, query.stdout) == (0, "NVIDIA RTX A5000\n")
    with pytest.raises(FileNotFoundError, match="python3: not mounted into"):
        ctr.run("python3 -c 1")

    reasons = [e["reason"] for e in cluster.events(namespace, "pod/p")]
    assert "Scheduled" in reasons and "Started" in reasons
    (prepared,) = cluster.calls(A5000, claim=f"{namespace}/a5000", method="NodePrepareResources")
    assert prepared["result"] == "ok"

    cluster.delete(sent, namespace)
    for kind, name in (("pod", "p"), ("resourceclaim", "a5000")):
        assert cluster.kubectl("get", kind, name, "-n", namespace, check=False).returncode != 0, kind


def test_faults_set_and_clear_the_annotations(cluster: FakepluginCluster, namespace: str) -> None:
    cluster.apply(product_claim("faulty", "NVIDIA T10"), namespace)
    cluster.faults.fail_prepare(namespace, "faulty", "injected: no GPU for you", times=2)
    cluster.faults.delay_prepare(namespace, "faulty", "3s")
    cluster.faults.fail_unprepare(namespace, "faulty", "injected: stuck")
    assert cluster.faults.claim_faults(namespace, "faulty") == {
        faults.PREPARE_ERROR: "injected: no GPU for you",
        faults.PREPARE_FAIL_COUNT: "2",
        faults.PREPARE_DELAY: "3s",
        faults.UNPREPARE_ERROR: "injected: stuck",
    }
    cluster.faults.fail_prepare(namespace, "faulty", "once more")  # no count: the old count goes
    assert cluster.faults.claim_faults(namespace, "faulty")[faults.PREPARE_ERROR] == "once more"
    assert faults.PREPARE_FAIL_COUNT not in cluster.faults.claim_faults(namespace, "faulty")
    cluster.faults.clear_claim(namespace, "faulty")
    assert cluster.faults.claim_faults(namespace, "faulty") == {}

    try:
        cluster.faults.set_device_faults(A5000, "gpu-0=xid79")
        assert cluster.faults.node_faults(A5000) == {faults.DEVICE_FAULTS: "gpu-0=xid79"}
    finally:
        cluster.faults.clear_node(A5000)  # the session's node: leave it as it was
    assert cluster.faults.node_faults(A5000) == {}


def test_attached_by_kubeconfig_only(cluster: FakepluginCluster, namespace: str) -> None:
    with FakepluginCluster.attach(cluster.kubeconfig) as attached:
        assert attached.get("namespace", namespace)["metadata"]["name"] == namespace
        with pytest.raises(FakepluginUnavailable, match="needs a local cluster's state dir"):
            attached.calls(A5000)
        copy = cluster.local.call_log(A5000)
        assert attached.calls(A5000, file=copy) == cluster.calls(A5000)
    assert all(p.running for p in cluster.local.status()), "closing an attached cluster stops nothing"
