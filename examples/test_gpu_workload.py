"""Testing a GPU workload with fakeplugin's pytest plugin: a complete test file (docs/testing.md).

    pip install fakeplugin          # registers the plugin: fixtures fakeplugin_cluster, fakeplugin_namespace
    pytest test_gpu_workload.py     # starts the seed lab (2 T10 + 1 RTX A5000) on a local cluster
    pytest test_gpu_workload.py --fakeplugin-kubeconfig ~/.kube/config   # a running cluster with our chart

Our CI runs this file against its session cluster (tests/e2e/test_testing_plugin.py).
"""

from __future__ import annotations

import pytest

from fakeplugin.testing import FakepluginCluster, PodTimeout

TRAINER = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: t10}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {expression: "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"}
---
apiVersion: v1
kind: Pod
metadata: {name: trainer}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  resourceClaims: [{name: gpu, resourceClaimName: t10}]
  containers:
  - name: main
    image: ubuntu:22.04
    command: [sleep, infinity]
    resources: {claims: [{name: gpu}]}
"""


def test_the_trainer_gets_one_t10_and_sees_only_it(
    fakeplugin_cluster: FakepluginCluster, fakeplugin_namespace: str
) -> None:
    cluster, ns = fakeplugin_cluster, fakeplugin_namespace
    cluster.apply(TRAINER, ns)
    cluster.wait_for_pod(ns, "trainer", phase="Running")

    (gpu,) = cluster.allocation(ns, "t10")  # the real kube-scheduler's choice
    assert gpu.request == "gpu" and gpu.pool == gpu.node and gpu.device.startswith("gpu-")

    main = cluster.container(ns, "trainer", "main")
    claim_uid = cluster.get("resourceclaim", "t10", ns)["metadata"]["uid"]
    assert main.cdi_devices == [f"k8s.gpu.nvidia.com/claim={claim_uid}-{gpu.device}"]
    assert list(main.gpus) == [gpu.device]  # device name → UUID, from the env of its CDI device
    uuid = main.gpus[gpu.device]
    smi = main.run("nvidia-smi -L")
    assert smi.returncode == 0, smi.stderr
    assert smi.stdout.splitlines() == [f"GPU 0: NVIDIA T10 (UUID: {uuid})"]


def test_a_gpu_no_node_has_leaves_the_pod_pending_with_the_schedulers_reason(
    fakeplugin_cluster: FakepluginCluster, fakeplugin_namespace: str
) -> None:
    cluster, ns = fakeplugin_cluster, fakeplugin_namespace
    cluster.apply(TRAINER.replace("NVIDIA T10", "NVIDIA B300"), ns)
    with pytest.raises(PodTimeout) as waited:
        cluster.wait_for_pod(ns, "trainer", timeout=15)
    assert "phase: Pending" in str(waited.value)
    assert "FailedScheduling" in str(waited.value)  # the pod's events are in the message
    assert cluster.allocation(ns, "t10") == []
