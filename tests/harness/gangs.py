"""Gangs run by Jobs for the e2e module tests/e2e/test_gangs.py and the doc checks of
docs/rack-scale-jobs.md (tests/test_docs.py): a gang's worker pod, its Job, the DeviceTaintRule of a
failover."""

from __future__ import annotations

from typing import Any

from fakeplugin.testing import container, pod

GPU_DRIVER = "gpu.nvidia.com"
XID_TAINT = f"{GPU_DRIVER}/xid"  # NVIDIA's taint key (docs/faults.md)


def worker(name: str, group: str) -> dict[str, Any]:
    """A pod of 4 GPUs (from template `{group}-gpus`) in PodGroup `group`."""
    claims = {"gpus": {"resourceClaimTemplateName": f"{group}-gpus"}}
    return pod(
        name,
        [container("worker", claims=list(claims))],
        claims=claims,
        schedulingGroup={"podGroupName": group},
    )


def gang_job(name: str, pods: int) -> dict[str, Any]:
    """An Indexed Job of `pods` workers in PodGroup `name` that fails whole when a pod is disrupted: its
    podFailurePolicy rule FailJob on DisruptionTarget, backoffLimit 0. With a podFailurePolicy the Job's
    podReplacementPolicy defaults to Failed and the Job controller counts a pod, and matches its policy,
    only once it is Failed, not while it is deleting (kubernetes/kubernetes v1.37.2
    pkg/apis/batch/v1/defaults.go; pkg/controller/job/job_controller.go isPodFailed)."""
    rule = {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    spec = {
        "completionMode": "Indexed",
        "completions": pods,
        "parallelism": pods,
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [rule]},
        "template": {"spec": worker(name, name)["spec"]},
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def no_execute(node: str, gpu: str) -> dict[str, Any]:
    """DeviceTaintRule `job-xid`: NVIDIA's XID 79 taint on `gpu` of `node` as NoExecute, which the device
    taint eviction controller acts on (resource.k8s.io/v1 from 1.37: versions.py)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "job-xid"},
        "spec": {
            "deviceSelector": {"driver": GPU_DRIVER, "pool": node, "device": gpu},
            "taint": {"key": XID_TAINT, "value": "79", "effect": "NoExecute"},
        },
    }
