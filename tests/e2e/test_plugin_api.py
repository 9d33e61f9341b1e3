"""`fakeplugin serve` against the real API server: publishing, reconciling and Prepare's claim reads.

The plugin runs for an API-only node of the session cluster (no kubelet there, so nothing wipes
its slices but us), talking to the real kube-apiserver; the test is the kubelet on its sockets. Its
inventory names no driverRelease: it emulates the default release, 0.5.0 (index-named slices).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from fakeplugin._proto.dra.v1 import api_pb2, api_pb2_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg_pb2
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.testing import resource_claim
from tests.harness.kube import apply, get, items, wait_for

pytestmark = pytest.mark.cluster


class Plugin:
    def __init__(self, cluster: Any, node: str, root: Path, kubeconfig: Path) -> None:
        self.cluster, self.node, self.root, self.kubeconfig = cluster, node, root, kubeconfig
        self.inventory = root / "inventory.yaml"
        self.log = root / "plugin.log"
        self.dra_sock = root / "plugins" / "gpu.nvidia.com" / "dra.sock"
        self.reg_sock = root / "reg" / "gpu.nvidia.com-reg.sock"
        self.cdi = root / "cdi"
        self.proc: subprocess.Popen | None = None

    def write_inventory(self, count: int) -> None:
        self.inventory.write_text(
            yaml.safe_dump(
                {
                    "driverVersion": "580.95.05",
                    "cudaDriverVersion": "12.8",
                    "nodes": [{"name": self.node, "gpus": [{"profile": "t4", "count": count}]}],
                }
            )
        )

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fakeplugin",
                "-v",
                "4",
                "serve",
                "--inventory",
                str(self.inventory),
                "--node-name",
                self.node,
                "--kubeconfig",
                str(self.kubeconfig),
                "--kubelet-registrar-directory-path",
                str(self.root / "reg"),
                "--kubelet-plugins-directory-path",
                str(self.root / "plugins"),
                "--cdi-root",
                str(self.cdi),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("a"),
        )
        wait_for(lambda: self.reg_sock.exists() and self.dra_sock.exists(), what="plugin sockets")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(20)

    def slices(self) -> list[dict[str, Any]]:
        return [s for s in items(self.cluster, "resourceslices") if s["spec"]["nodeName"] == self.node]

    def prepare(self, *claims: tuple[str, str, str]) -> dict[str, Any]:
        with grpc.insecure_channel(f"unix:{self.dra_sock}") as ch:
            resp = api_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
                api_pb2.NodePrepareResourcesRequest(
                    claims=[api_pb2.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]
                ),
                timeout=30,
            )
        return dict(resp.claims)


@pytest.fixture
def plugin(cluster: Any) -> Iterator[Plugin]:
    node = f"api-node-{uuid.uuid4().hex[:6]}"
    apply(cluster, None, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    root = Path(tempfile.mkdtemp(prefix="fpapi-", dir="/tmp"))  # short: unix socket paths
    p = Plugin(cluster, node, root, cluster.kubeconfig)
    p.write_inventory(2)
    p.start()
    try:
        yield p
    finally:
        p.stop()
        cluster.kubectl("delete", "node", node, "--wait=false")
        shutil.rmtree(root)


def test_publishes_and_recreates_a_deleted_slice(plugin):
    (first,) = wait_for(lambda: plugin.slices(), what="the node's slice")
    assert first["metadata"]["name"].startswith(f"00000-gpu.nvidia.com-{plugin.node}-")  # 0.5.0's name
    assert [d["name"] for d in first["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert first["spec"]["pool"] == {"name": plugin.node, "generation": 1, "resourceSliceCount": 1}
    plugin.cluster.kubectl("delete", "resourceslice", first["metadata"]["name"])
    (again,) = wait_for(
        lambda: [s for s in plugin.slices() if s["metadata"]["uid"] != first["metadata"]["uid"]],
        what="a re-created slice",
    )
    assert again["spec"]["devices"] == first["spec"]["devices"]


def test_inventory_change_updates_the_slice_in_place(plugin):
    (before,) = wait_for(lambda: plugin.slices(), what="the node's slice")
    plugin.write_inventory(3)
    (after,) = wait_for(
        lambda: [s for s in plugin.slices() if len(s["spec"]["devices"]) == 3],
        what="3 devices after the inventory change",
        timeout=60,
    )
    assert after["metadata"]["name"] == before["metadata"]["name"]  # updated, not replaced
    assert after["spec"]["pool"]["resourceSliceCount"] == 1


def test_restart_removes_duplicates_and_keeps_one_slice(plugin):
    (original,) = wait_for(lambda: plugin.slices(), what="the node's slice")
    plugin.stop()
    assert not plugin.reg_sock.exists() and not plugin.dra_sock.exists(), "sockets removed on SIGTERM"
    duplicate = {k: original[k] for k in ("apiVersion", "kind", "spec")}
    duplicate["metadata"] = {
        "generateName": original["metadata"]["generateName"],
        "ownerReferences": original["metadata"]["ownerReferences"],
    }
    plugin.cluster.kubectl("create", "-f", "-", input=json.dumps(duplicate))
    assert len(plugin.slices()) == 2
    plugin.start()
    (kept,) = wait_for(lambda: len(plugin.slices()) == 1 and plugin.slices(), what="duplicates removed")
    assert [d["name"] for d in kept["spec"]["devices"]] == ["gpu-0", "gpu-1"]


def test_prepare_reads_claims_from_the_api_server(plugin, namespace):
    cluster = plugin.cluster
    wait_for(lambda: plugin.slices(), what="the node's slice")

    def claim(name: str, device: str | None) -> dict[str, Any]:
        apply(cluster, namespace, resource_claim(name))
        obj = get(cluster, "resourceclaim", name, "-n", namespace)
        if device:
            obj["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.nvidia.com",
                                "pool": plugin.node,
                                "device": device,
                            }
                        ]
                    }
                }
            }
            cluster.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(obj))
        return obj

    good = claim("good", "gpu-1")
    pending = claim("pending", None)
    missing_uid = str(uuid.uuid4())
    result = plugin.prepare(
        (namespace, "good", good["metadata"]["uid"]),
        (namespace, "pending", pending["metadata"]["uid"]),
        (namespace, "good", "0" * 8 + good["metadata"]["uid"][8:]),  # same name, another UID
        (namespace, "missing", missing_uid),
    )
    ok = result[good["metadata"]["uid"]]
    assert ok.error == ""
    assert [(d.pool_name, d.device_name, list(d.request_names)) for d in ok.devices] == [
        (plugin.node, "gpu-1", ["gpu"])
    ]
    uid = good["metadata"]["uid"]
    assert list(ok.devices[0].cdi_device_ids) == [f"k8s.gpu.nvidia.com/claim={uid}-gpu-1"]
    spec = yaml.safe_load((plugin.cdi / f"k8s.gpu.nvidia.com-claim_{uid}.yaml").read_text())
    assert spec["devices"][0]["name"] == f"{uid}-gpu-1"
    assert "not allocated" in result[pending["metadata"]["uid"]].error
    assert "got replaced" in result["0" * 8 + good["metadata"]["uid"][8:]].error
    assert f"retrieve claim {namespace}/missing" in result[missing_uid].error


def test_unreachable_api_server_is_retried_and_getinfo_still_answers(tmp_path, cluster):
    root = Path(tempfile.mkdtemp(prefix="fpapi-", dir="/tmp"))
    try:
        with socket_on_loopback() as port:  # reserved and closed: connections are refused
            kubeconfig = root / "kubeconfig"
            kubeconfig.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "current-context": "c",
                        "clusters": [
                            {
                                "name": "c",
                                "cluster": {
                                    "server": f"https://127.0.0.1:{port}",
                                    "insecure-skip-tls-verify": True,
                                },
                            }
                        ],
                        "users": [{"name": "u", "user": {"token": "x"}}],
                        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    }
                )
            )
            p = Plugin(cluster, "nowhere", root, kubeconfig)
            p.write_inventory(1)
            p.start()
            try:
                wait_for(lambda: "retrying in" in p.log.read_text(), what="a logged retry")
                with grpc.insecure_channel(f"unix:{p.reg_sock}") as ch:
                    info = reg_grpc.RegistrationStub(ch).GetInfo(reg_pb2.InfoRequest(), timeout=1)
                assert (info.type, info.name, info.endpoint) == (
                    "DRAPlugin",
                    "gpu.nvidia.com",
                    str(p.dra_sock),
                )
                assert p.proc is not None and p.proc.poll() is None, (
                    "an unreachable API server is never fatal"
                )
            finally:
                p.stop()
    finally:
        shutil.rmtree(root)


class socket_on_loopback:
    """A loopback port nothing listens on (bound, never listening, so no one else takes it)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return self._sock.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        self._sock.close()
