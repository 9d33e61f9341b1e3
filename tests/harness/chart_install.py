"""The chart installed on real API servers, for tests/e2e/test_chart_install*.py: a test release rendered with
helm (`release_args`, `render`; `as_list` for kubectl), and a private control plane whose API server
authorizes with RBAC (`running_rbac_apiserver`: etcd and kube-apiserver of the session cluster's version,
a static admin token; `ApiServer.kubectl` runs as system:masters).
"""

from __future__ import annotations

import json
import secrets
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.cluster import components, versions
from fakeplugin.cluster.credentials import front_proxy_certificates
from fakeplugin.cluster.layout import StateLayout
from tests.harness.chart import CHART
from tests.harness.paths import REPO
from tests.harness.tooling import tool

START_TIMEOUT = 90.0


def release_args(namespace: str, driver: str) -> list[str]:
    """A test release of the chart: the seed lab, its own driver name (its DeviceClasses touch no one
    else's), and a nodeSelector no node has (no plugin pod competes with the session's plugins)."""
    return [
        "--namespace",
        namespace,
        "-f",
        "examples/seed-lab-values.yaml",
        "--set-file",
        "inventory=examples/seed-lab.yaml",
        "--set",
        f"driverName={driver}",
        "--set-string",
        "kubeletPlugin.nodeSelector.fakeplugin-test/no-such-node=true",
    ]


def render(namespace: str, release: str, driver: str, *extra: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [
            str(tool("helm")),
            "template",
            release,
            str(CHART),
            "--kube-version",
            versions.selected(),
            *release_args(namespace, driver),
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def as_list(objs: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})


@dataclass(frozen=True)
class ApiServer:
    """A private RBAC-authorizing control plane; kubectl() runs as the system:masters admin."""

    kubeconfig: Path
    kubectl_binary: Path

    def kubectl(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.kubectl_binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((components.LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_ready(url: str, token: str | None, proc: subprocess.Popen[bytes], log: Path) -> None:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"{url}: process exited:\n{log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready after {START_TIMEOUT:.0f}s:\n{log.read_text()[-3000:]}")


@contextmanager
def running_rbac_apiserver(root: Path) -> Iterator[ApiServer]:
    """etcd and a kube-apiserver authorizing with RBAC under `root`, stopped when the block ends."""
    bins = {name: tool(name) for name in ("etcd", "kube-apiserver", "kubectl")}
    layout = StateLayout(root)
    layout.pki.mkdir(parents=True)
    for argv in (
        ["openssl", "genrsa", "-out", str(layout.pki / "sa.key"), "2048"],
        ["openssl", "rsa", "-in", str(layout.pki / "sa.key"), "-pubout", "-out", str(layout.pki / "sa.pub")],
    ):
        subprocess.run(argv, capture_output=True, check=True, timeout=60)
    front_proxy_certificates(layout)  # components.apiserver_argv names them
    token = secrets.token_hex(16)
    tokens = layout.root / "tokens.csv"
    tokens.write_text(f'{token},admin,admin-uid,"system:masters"\n')
    etcd_client, etcd_peer, apiserver = free_ports(3)
    ports = components.Ports(etcd_client, etcd_peer, apiserver, scheduler=0, controller_manager=0)
    # The session cluster's API server, but authorizing with RBAC, only our admin token, and
    # privileged containers allowed (as kubeadm clusters do) for the plugin's DaemonSet.
    ours = (
        "--authorization-mode=",
        "--anonymous-auth=",
        "--token-auth-file=",
        "--feature-gates=",
        "--allow-privileged=",
    )
    apiserver_argv = [
        arg
        for arg in components.apiserver_argv(
            bins["kube-apiserver"], layout, ports, {}, versions.release(versions.selected())
        )
        if not arg.startswith(ours)
    ] + [
        "--authorization-mode=RBAC",
        "--anonymous-auth=false",
        f"--token-auth-file={tokens}",
        "--allow-privileged=true",
    ]
    layout.logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv, url, auth in (
            (
                "etcd",
                components.etcd_argv(bins["etcd"], layout, ports),
                f"http://{components.LOOPBACK}:{etcd_client}/health",
                None,
            ),
            ("kube-apiserver", apiserver_argv, f"https://{components.LOOPBACK}:{apiserver}/readyz", token),
        ):
            with layout.log(name).open("wb") as log:
                procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=layout.root))
            wait_ready(url, auth, procs[-1], layout.log(name))
        layout.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "admin",
                    "clusters": [
                        {
                            "name": "rbac",
                            "cluster": {
                                "server": f"https://{components.LOOPBACK}:{apiserver}",
                                "insecure-skip-tls-verify": True,
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [{"name": "admin", "context": {"cluster": "rbac", "user": "admin"}}],
                }
            )
        )
        yield ApiServer(layout.kubeconfig, bins["kubectl"])
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
