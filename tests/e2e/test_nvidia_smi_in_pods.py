"""End-to-end: the fake nvidia-smi shows a container exactly the GPUs it was given.

The real scheduler allocates, the real kubelet prepares through our plugin and the fake CRI resolves the
CDI specs with the real CDI library; its record of a container's mounts is replayed under a temporary root
(host path → container path), and the mounted /usr/bin/nvidia-smi is run there with /bin/sh.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fakeplugin import smi
from tests.e2e.kube import apply, get, pod_phase, resource_claim, wait_for

pytestmark = pytest.mark.cluster

T10_SELECTOR = {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"}}


def container_root(record: dict[str, Any], root: Path) -> Path:
    """The container's files as its record says they were mounted."""
    for mount in record["mounts"]:
        source, target = Path(mount["source"]), root / mount["destination"].lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True)
        else:
            shutil.copy2(source, target)
    return root


def nvidia_smi(record: dict[str, Any], root: Path, *args: str) -> list[str]:
    env = dict(item.split("=", 1) for item in record["env"])
    env.update({"PATH": "/usr/bin:/bin", smi.TEST_ROOT_ENV: str(root)})
    result = subprocess.run(
        ["/bin/sh", str(root / "usr/bin/nvidia-smi"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stdout
    return result.stdout.splitlines()


def allocated_uuids(cluster: Any, namespace: str, claim: str) -> list[tuple[int, str]]:
    """(minor, uuid) of each device allocated to the claim, from its node's ResourceSlice."""
    allocation = get(cluster, "resourceclaim", claim, "-n", namespace)["status"]["allocation"]
    results = allocation["devices"]["results"]
    slices = get(cluster, "resourceslices")["items"]
    uuids = {
        (s["spec"]["nodeName"], d["name"]): d["attributes"]["uuid"]["string"]
        for s in slices
        if s["spec"]["driver"] == "gpu.nvidia.com"
        for d in s["spec"]["devices"]
    }
    return [(int(r["device"].removeprefix("gpu-")), uuids[(r["pool"], r["device"])]) for r in results]


def test_nvidia_smi_lists_exactly_the_containers_gpus(cluster: Any, namespace: str, tmp_path: Path) -> None:
    claims = [resource_claim(name, {"deviceClassName": "gpu.nvidia.com", "selectors": [T10_SELECTOR]})
              for name in ("first", "second")]  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "smi"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "resourceClaims": [{"name": n, "resourceClaimName": n} for n in ("first", "second")],
            "containers": [
                {"name": "both", "image": "ubuntu:22.04", "command": ["sleep", "infinity"],
                 "resources": {"claims": [{"name": "first"}, {"name": "second"}]}},
                {"name": "one", "image": "ubuntu:22.04", "command": ["sleep", "infinity"],
                 "resources": {"claims": [{"name": "second"}]}},
            ],
        },
    }  # fmt: skip
    apply(cluster, namespace, *claims, pod)
    wait_for(lambda: pod_phase(cluster, namespace, "smi") == "Running", what="pod smi Running", timeout=180)

    (first,) = allocated_uuids(cluster, namespace, "first")
    (second,) = allocated_uuids(cluster, namespace, "second")
    both = cluster.container_record(namespace, "smi", "both")
    # Both claims' specs mount the script; the CDI library keeps one mount per container path.
    assert [m["destination"] for m in both["mounts"]].count(smi.SCRIPT_CONTAINER_PATH) == 1
    root = container_root(both, tmp_path / "both")
    assert nvidia_smi(both, root, "-L") == [
        f"GPU {i}: NVIDIA T10 (UUID: {uuid})" for i, (_, uuid) in enumerate(sorted([first, second]))
    ]
    table = nvidia_smi(both, root)
    assert "Driver Version: 580.126.20" in table[2] and "CUDA Version: 13.0" in table[2]
    assert sum("NVIDIA T10" in line for line in table) == 2

    one = cluster.container_record(namespace, "smi", "one")
    root = container_root(one, tmp_path / "one")
    assert nvidia_smi(one, root, "-L") == [f"GPU 0: NVIDIA T10 (UUID: {second[1]})"]
    assert nvidia_smi(one, root, "--query-gpu=index,uuid,name", "--format=csv,noheader") == [
        f"0, {second[1]}, NVIDIA T10"
    ]
