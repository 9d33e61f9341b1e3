"""The e2e session's cluster (tests/e2e/conftest.py): the seed lab of examples/seed-lab.yaml as the reference
lab runs it, and how its tests read it.

Nodes: `T10` (two T10s) and `A5000` (one RTX A5000), real kubelets labelled `GPU_NODE_LABELS`, plus the plain
kwok-simulated `WORKERS`. The plugins re-read the inventory file: `write_inventory`, then wait up to
`WITHIN` for `published` to show it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.runtime.nodes import INVENTORY_POLL_SECONDS
from fakeplugin.testing import device_request, opaque_config, resource_claim
from tests.harness.kube import get, items, pod_phase
from tests.harness.paths import SEED_LAB

T10 = "capi-dralabs-md-gput10-gzl84-f2m2d"
A5000 = "capi-dralabs-md-gpua5000-jw4mx-d64jz"
GPU_NODE_LABELS = {"nvidia.com/dra-kubelet-plugin": "true"}  # as the lab labels GPU nodes
WORKERS = {f"worker-{i}": {"node-role.kubernetes.io/worker": ""} for i in (1, 2, 3)}
WITHIN = 6 * INVENTORY_POLL_SECONDS  # a poll, the publisher's update, the API server: a few seconds


def _gpu_operator_labels(product: str, count: int, memory_mib: int, family: str, cc: str) -> dict[str, str]:
    """A seed-lab GPU node's GPU Operator labels (ClusterPolicy, the default) but GFD's timestamp, written
    out by hand from GFD v0.20.0's rules (NVIDIA/k8s-device-plugin `internal/lm/`) and the operator's
    (NVIDIA/gpu-operator v26.3.1 `controllers/state_manager.go`): the lab's driverVersion 580.126.20 and
    cudaDriverVersion 13.0 split at the dots, the NVML name with blanks as `-`, memory.total in MiB."""
    major, minor = cc.split(".")
    deploy = (
        "driver",
        "gpu-feature-discovery",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "node-status-exporter",
        "operator-validator",
    )
    return {
        "nvidia.com/cuda.driver.major": "580",
        "nvidia.com/cuda.driver.minor": "126",
        "nvidia.com/cuda.driver.rev": "20",
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
        "nvidia.com/cuda.driver-version.major": "580",
        "nvidia.com/cuda.driver-version.minor": "126",
        "nvidia.com/cuda.driver-version.revision": "20",
        "nvidia.com/cuda.driver-version.full": "580.126.20",
        "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0",
        "nvidia.com/cuda.runtime-version.full": "13.0",
        "nvidia.com/gpu.machine": "Standard-PC-Q35-ICH9-2009",  # "Standard PC (Q35 + ICH9, 2009)" sanitised
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": major,
        "nvidia.com/gpu.compute.minor": minor,
        "nvidia.com/gpu.mode": "unknown",  # no capture gives these boards' PCI class
        "nvidia.com/mig.capable": "false",
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
        "nvidia.com/gpu.present": "true",
        **{f"nvidia.com/gpu.deploy.{o}": "true" for o in deploy},
        "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
    }


# Each GPU node's: NVML "NVIDIA T10", 15360 MiB, CC 7.5 (turing from 7.5 on); "NVIDIA RTX A5000", 23028 MiB
# with ECC on (the lab's capacity), CC 8.6 (ampere below 8.9).
GPU_OPERATOR_LABELS = {
    T10: _gpu_operator_labels("NVIDIA-T10", 2, 15360, "turing", "7.5"),
    A5000: _gpu_operator_labels("NVIDIA-RTX-A5000", 1, 23028, "ampere", "8.6"),
}


def seed_lab_cluster_inventory(path: Path) -> Path:
    """examples/seed-lab.yaml with the lab's GPU-node label and its three plain workers added."""
    inventory = yaml.safe_load(SEED_LAB.read_text())
    for node in inventory["nodes"]:
        node["labels"] = {**node.get("labels", {}), **GPU_NODE_LABELS}
    inventory["nodes"] += [{"name": name, "labels": labels} for name, labels in WORKERS.items()]
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def write_inventory(path: Path, inventory: dict[str, Any]) -> None:
    """Atomically, as a ConfigMap update swaps the file: the plugin never reads half of it."""
    write_atomic(path, yaml.safe_dump(inventory, sort_keys=False).encode(), mode=0o644)


def product_claim(name: str, product: str) -> dict[str, Any]:
    """A one-GPU claim whose CEL selector asks for one product name."""
    cel = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
    return resource_claim(name, device_request(selector=cel))


def timeslicing_config(**extra: Any) -> dict[str, Any]:
    """An opaque GpuConfig for request `gpu`: time-slicing with the Long interval, plus `extra` fields."""
    return opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
            **extra,
        },
        requests=["gpu"],
    )


def our_slices(cluster: Any) -> list[dict[str, Any]]:
    return [s for s in items(cluster, "resourceslices") if s["spec"]["driver"] == "gpu.nvidia.com"]


def published(cluster: Any) -> dict[str, dict[str, str]]:
    """Node → device name → UUID, as the ResourceSlices show them."""
    return {
        s["spec"]["nodeName"]: {d["name"]: d["attributes"]["uuid"]["string"] for d in s["spec"]["devices"]}
        for s in our_slices(cluster)
    }


def running(cluster: Any, namespace: str, pod: str) -> bool:
    return pod_phase(cluster, namespace, pod) == "Running"


def allocation(cluster: Any, namespace: str, claim: str) -> list[dict[str, Any]]:
    """The claim's allocation results; [] while unallocated."""
    status = get(cluster, "resourceclaim", claim, "-n", namespace).get("status", {})
    return status.get("allocation", {}).get("devices", {}).get("results", [])


def cdi_file(cluster: Any, node: str, claim_uid: str) -> Path:
    return cluster.node_dirs(node).cdi / f"k8s.gpu.nvidia.com-claim_{claim_uid}.yaml"
