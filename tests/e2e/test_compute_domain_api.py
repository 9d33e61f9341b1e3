"""End-to-end: our ComputeDomain CRDs on the real API server, and `fakeplugin compute-domain-controller`
(a subprocess, as its Deployment would run it) doing what NVIDIA's controller does for a ComputeDomain.

The real API server checks what the CRDs say (defaults, enum, the immutable spec); the controller makes the
workload and daemon ResourceClaimTemplates, the daemon DaemonSet and the finalizer, holds its Lease, builds
the global status from a ComputeDomainClique, and tears everything down in NVIDIA's order. No kubelet plugin
for compute-domain.nvidia.com runs here: the clique is written by the test (the daemon's part), and a pod
bound to a simulated worker stands in for the daemon pod the controller's clique cleanup looks for.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin.apis import computedomain as api
from tests.harness.kube import get, items, wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
NODE = "worker-3"  # a kwok-simulated worker of the seed lab
LEASE = "dra-driver-nvidia-gpu-controller"


def compute_domain(name: str, template: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"channel": {"resourceClaimTemplate": {"name": template}}, **spec},
    }


def create(cluster: Any, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    out = cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(obj)).stdout
    return json.loads(out)


def maybe(cluster: Any, *args: str) -> dict[str, Any] | None:
    done = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


@pytest.fixture(scope="module")
def crds(cluster: Any) -> Iterator[None]:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(api.crds()))
    for crd in api.crds():
        cluster.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )
    yield
    # CDs of a failed test may keep their finalizer: the CRDs stay for a rerun rather than hang here.


@pytest.fixture
def driver_namespace(cluster: Any) -> Iterator[str]:
    name = cluster.create_namespace("cd-driver")
    yield name
    cluster.delete_namespace(name)


@pytest.fixture
def controller(cluster: Any, driver_namespace: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = tmp_path / "controller.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    argv = [sys.executable, "-m", "fakeplugin", "-v", "4", "compute-domain-controller"]
    argv += ["--kubeconfig", str(cluster.kubeconfig), "--namespace", driver_namespace]
    argv += ["--pod-name", "e2e", "--leader-election-enabled"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print("controller log (tail):\n" + "\n".join(log.read_text().splitlines()[-60:]))


def test_the_api_server_applies_nvidias_schema(cluster, crds, namespace):
    cd = create(cluster, namespace, compute_domain("defaults", "defaults-channel"))
    assert cd["spec"]["numNodes"] == 0
    assert cd["spec"]["channel"]["allocationMode"] == "Single"
    assert "status" not in cd  # a create cannot set the status subresource; nothing to default yet
    status = json.loads(
        cluster.kubectl(
            "patch",
            "computedomain",
            "defaults",
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            '{"status": {}}',
            "-o",
            "json",
        ).stdout
    )["status"]
    assert status == {"status": "NotReady"}

    refused = cluster.kubectl(
        "patch",
        "computedomain",
        "defaults",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec": {"numNodes": 2}}',
        check=False,
    )
    assert refused.returncode != 0
    assert "A computeDomain.spec is immutable" in refused.stderr

    bad = compute_domain("bad", "bad-channel")
    bad["spec"]["channel"]["allocationMode"] = "Some"
    refused = cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False)
    assert refused.returncode != 0 and "Unsupported value" in refused.stderr
    negative = cluster.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(compute_domain("neg", "c", numNodes=-1)),
        check=False,
    )
    assert negative.returncode != 0
    cluster.kubectl("delete", "computedomain", "defaults", "-n", namespace)


def test_the_controller_makes_nvidias_objects_and_status(
    cluster, crds, namespace, driver_namespace, controller
):
    cd = create(cluster, namespace, compute_domain("cd", "cd-channel", numNodes=1))
    uid = cd["metadata"]["uid"]
    ours = {api.COMPUTE_DOMAIN_LABEL: uid}

    workload = wait_for(
        lambda: maybe(cluster, "resourceclaimtemplate", "cd-channel", "-n", namespace),
        what="the workload ResourceClaimTemplate",
        timeout=60,
    )
    assert workload["metadata"]["labels"] == {**ours, api.TARGET_LABEL: "Workload"}
    assert workload["metadata"]["finalizers"] == [api.FINALIZER]
    (request,) = workload["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "channel"
    assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"
    (config,) = workload["spec"]["spec"]["devices"]["config"]
    assert config["opaque"] == {
        "driver": "compute-domain.nvidia.com",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainChannelConfig",
            "domainID": uid,
            "allocationMode": "Single",
        },
    }

    daemon_name = f"computedomain-daemon-{uid}"
    daemon = wait_for(
        lambda: maybe(cluster, "resourceclaimtemplate", daemon_name, "-n", driver_namespace),
        what="the daemon ResourceClaimTemplate",
        timeout=30,
    )
    assert daemon["metadata"]["labels"] == {**ours, api.TARGET_LABEL: "Daemon"}
    assert daemon["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["domainID"] == uid
    ds = wait_for(
        lambda: maybe(cluster, "daemonset", daemon_name, "-n", driver_namespace),
        what="the daemon DaemonSet",
        timeout=30,
    )
    assert ds["metadata"]["finalizers"] == [api.FINALIZER]
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == ours
    assert pod_spec["resourceClaims"] == [
        {"name": "compute-domain-daemon", "resourceClaimTemplateName": daemon_name}
    ]
    assert pod_spec["containers"][0]["command"][:1] == ["fakeplugin"]
    wait_for(
        lambda: (
            api.FINALIZER
            in (get(cluster, "computedomain", "cd", "-n", namespace)["metadata"].get("finalizers") or [])
        ),
        what="the ComputeDomain's finalizer",
        timeout=30,
    )
    # numNodes 1, no node yet
    wait_for(
        lambda: (
            (get(cluster, "computedomain", "cd", "-n", namespace).get("status") or {}).get("status")
            == "NotReady"
        ),
        what="status NotReady",
        timeout=30,
    )

    lease = get(cluster, "lease", LEASE, "-n", driver_namespace)
    assert lease["spec"]["holderIdentity"].startswith("e2e-")
    renewed = lease["spec"]["renewTime"]
    wait_for(
        lambda: get(cluster, "lease", LEASE, "-n", driver_namespace)["spec"]["renewTime"] != renewed,
        what="the Lease renewed",
        timeout=15,
    )

    # The daemon's part: a pod scheduled on the node (what the controller's clique cleanup checks) and this
    # node's entry in the clique, Ready.
    stand_in = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "daemon-stand-in", "labels": {api.COMPUTE_DOMAIN_LABEL: "e2e-stand-in"}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
    }
    create(cluster, driver_namespace, stand_in)
    clique_id = "8f0e6c62-7a1e-4d2a-9b9b-3c1b7d1e0a11.1"
    clique = {
        "apiVersion": api.API_VERSION,
        "kind": "ComputeDomainClique",
        "metadata": {"name": api.clique_name(uid, clique_id), "labels": ours},
        "daemons": [
            {
                "nodeName": NODE,
                "ipAddress": "10.244.0.7",
                "cliqueID": clique_id,
                "index": 0,
                "status": "Ready",
            }
        ],
    }
    create(cluster, driver_namespace, clique)

    def cd_status() -> dict[str, Any]:
        return get(cluster, "computedomain", "cd", "-n", namespace).get("status") or {}

    ready = wait_for(
        lambda: cd_status().get("status") == "Ready" and cd_status(), what="status Ready", timeout=20
    )
    assert ready["nodes"] == [
        {"name": NODE, "ipAddress": "10.244.0.7", "cliqueID": clique_id, "index": 0, "status": "Ready"}
    ]

    # The daemon pod goes: the controller drops the stale clique entry, the node leaves the status.
    cluster.kubectl("delete", "pod", "daemon-stand-in", "-n", driver_namespace, "--grace-period=0", "--force")
    wait_for(
        lambda: "nodes" not in cd_status() and cd_status().get("status") == "NotReady",
        what="the node gone from the status, NotReady",
        timeout=20,
    )
    assert not get(
        cluster, "computedomainclique", api.clique_name(uid, clique_id), "-n", driver_namespace
    ).get("daemons")

    # Deletion: templates, DaemonSet, node label, finalizers; then the ComputeDomain goes.
    cluster.kubectl("label", "node", NODE, f"{api.COMPUTE_DOMAIN_LABEL}={uid}", "--overwrite")
    cluster.kubectl("delete", "computedomain", "cd", "-n", namespace, "--wait=false")
    wait_for(
        lambda: maybe(cluster, "computedomain", "cd", "-n", namespace) is None,
        what="the ComputeDomain gone",
        timeout=60,
    )
    assert maybe(cluster, "resourceclaimtemplate", "cd-channel", "-n", namespace) is None
    assert maybe(cluster, "resourceclaimtemplate", daemon_name, "-n", driver_namespace) is None
    assert maybe(cluster, "daemonset", daemon_name, "-n", driver_namespace) is None
    assert api.COMPUTE_DOMAIN_LABEL not in get(cluster, "node", NODE)["metadata"].get("labels", {})
    assert not [
        o
        for o in items(cluster, "resourceclaimtemplates", "-A", "-l", api.COMPUTE_DOMAIN_LABEL)
        if o["metadata"]["labels"][api.COMPUTE_DOMAIN_LABEL] == uid
    ]

    # SIGTERM: the controller stops and gives its Lease back.
    controller.send_signal(signal.SIGTERM)
    assert controller.wait(30) == 0
    assert not get(cluster, "lease", LEASE, "-n", driver_namespace)["spec"].get("holderIdentity")
