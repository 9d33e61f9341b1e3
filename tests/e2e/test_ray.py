"""End-to-end: Ray (ray-project/ray from PyPI, `tests.harness.rayvenv.RAY_VERSION`) started as a claim's
container on the local cluster (`FakepluginCluster.run_as_container`: the container's env and the mock NVML
library CDI mounted) counts exactly the claim's GPUs and names their accelerator type from the NVML name, as
on a real node. `--long` tier only (hack/test.sh LONG_LOCAL_TESTS): Ray's wheel is 79 MB and `ray.init`
starts its own processes; the snippet lists them and the test checks that none outlives `ray.shutdown()`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import pytest

from fakeplugin.cluster import binaries
from fakeplugin.testing import FakepluginCluster, container, device_request, pod, resource_claim
from tests.harness import rayvenv
from tests.harness.seedlab import A5000, T10, our_slices

pytestmark = pytest.mark.cluster

# Ray as a user starts it in a container (argv[1]: its temp dir); prints its resources and the processes it
# started (pid, start time: /proc/<pid>/stat fields 4 and 22), listed before ray.shutdown().
RAY = """
import json, os, sys
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray

def started():
    stat = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            text = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        stat[int(pid)] = (int(fields[1]), fields[19])
    mine = {os.getpid()}
    while True:
        more = {pid for pid, (ppid, _) in stat.items() if ppid in mine} - mine
        if not more:
            return [[pid, stat[pid][1]] for pid in sorted(mine - {os.getpid()})]
        mine |= more

ray.init(num_cpus=1, include_dashboard=False, object_store_memory=80 * 1024 * 1024, _temp_dir=sys.argv[1])
resources = ray.cluster_resources()
processes = started()
ray.shutdown()
print(json.dumps({"resources": resources, "processes": processes}))
"""


@pytest.fixture(scope="module")
def ray_python() -> Path:
    return rayvenv.python(binaries.cache_root())


def alive(processes: list[list[object]]) -> list[object]:
    """The pids of `processes` ([pid, start time]) still running, the same process (not a reused pid)."""
    left = []
    for pid, start in processes:
        try:
            text = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if text[text.rindex(")") + 2 :].split()[19] == start:
            left.append(pid)
    return left


@pytest.mark.parametrize(
    ("node", "product", "count"), [(T10, "NVIDIA T10", 2), (A5000, "NVIDIA RTX A5000", 1)]
)
def test_ray_as_the_claims_container_counts_its_gpus_and_names_their_type(
    cluster: FakepluginCluster, namespace: str, ray_python: Path, node: str, product: str, count: int
) -> None:
    cel = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
    cluster.apply(
        [
            resource_claim("gpus", device_request(selector=cel, count=count)),
            pod("ray", [container("head")], claims={"gpu": {"resourceClaimName": "gpus"}}),
        ],
        namespace,
    )
    assert cluster.wait_for_pod(namespace, "ray", timeout=180)["spec"]["nodeName"] == node
    allocated = [a.device for a in cluster.allocation(namespace, "gpus")]
    (slices,) = [s for s in our_slices(cluster) if s["spec"]["nodeName"] == node]
    names = {d["name"]: d["attributes"]["productName"]["string"] for d in slices["spec"]["devices"]}
    (name,) = {names[device] for device in allocated}

    temp_dir = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths live below it
    try:
        done = cluster.run_as_container(
            namespace, "ray", "head", [str(ray_python), "-c", RAY, temp_dir], timeout=300
        )
        assert done.returncode == 0, done.stderr[-4000:]
        report = json.loads(done.stdout.splitlines()[-1])
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
    resources = report["resources"]
    assert resources.get("GPU") == len(allocated) == count, resources
    types = {k: v for k, v in resources.items() if k.startswith("accelerator_type:")}
    assert types == {f"accelerator_type:{rayvenv.accelerator_type(name)}": 1.0}, resources

    assert report["processes"], "ray.init started no process"
    for _ in range(100):  # ray.shutdown() signalled them; each ends within moments
        if not alive(report["processes"]):
            break
        time.sleep(0.1)
    left = alive(report["processes"])
    for pid in left:  # this test started them: end them before failing
        os.kill(int(pid), signal.SIGKILL)
    assert left == [], f"Ray's processes still running after ray.shutdown(): {left}"
