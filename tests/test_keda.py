"""KEDA on a local cluster, the parts that need no cluster: the bridge's relays (real sockets, a real child
process), the certificates (openssl reads them back), the API server's aggregation flags, KEDA's command
lines (loopback only) and its manifests as we change them (from its module: the build tier)."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakeplugin.cluster import binaries, components, keda, versions
from fakeplugin.cluster.bridge import RelayEnd, parse_pairs
from fakeplugin.cluster.credentials import front_proxy_certificates, serving_certificate
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.machine import free_ports
from tests.harness.tooling import unavailable


def openssl_text(*args: str) -> str:
    return subprocess.run(["openssl", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A TCP server on loopback that answers each connection with b"echo:" + what it read until EOF."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
                conn.sendall(b"echo:" + data)

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def wait_listening(where: int | Path) -> None:
    """Until something accepts on loopback port `where`, or on the unix socket at `where`."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        family = socket.AF_UNIX if isinstance(where, Path) else socket.AF_INET
        address = str(where) if isinstance(where, Path) else ("127.0.0.1", where)
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.settimeout(1)
                probe.connect(address)
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {address}")


def test_bridges_relay_tcp_through_a_unix_socket_both_ways(tmp_path: Path, echo_server: int) -> None:
    # As the host side and the adapter's side are chained: tcp -> unix (one bridge) -> tcp (the other).
    (front,) = free_ports(1)
    sock = tmp_path / "relay.sock"
    bridge = [sys.executable, "-m", "fakeplugin.cluster.bridge"]
    procs = [
        subprocess.Popen([*bridge, f"unix:{sock}=tcp:{echo_server}"]),
        subprocess.Popen([*bridge, f"tcp:{front}=unix:{sock}"]),
    ]
    try:
        wait_listening(sock)  # the far bridge first: the near one's connection goes straight to it
        wait_listening(front)
        payload = bytes(range(256)) * 1024  # larger than one read
        with socket.create_connection(("127.0.0.1", front), timeout=10) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)  # the half-close travels: the echo server answers at EOF
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer == b"echo:" + payload
    finally:
        for proc in procs:
            proc.terminate()
            assert proc.wait(timeout=10) == 0
    assert not sock.exists() or sock.is_socket()


def test_a_bridge_runs_its_command_and_exits_with_its_status(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    bridge = [sys.executable, "-m", "fakeplugin.cluster.bridge", f"tcp:{port}=unix:{tmp_path / 's'}"]
    out = subprocess.run(
        [*bridge, "--", "sh", "-c", "exit 7"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 7, out.stderr


def test_a_bridge_refuses_bad_endpoints_by_name() -> None:
    assert parse_pairs(["tcp:80=unix:/x"]) == [(RelayEnd(port=80), RelayEnd(path=Path("/x")))]
    for spec, said in (
        ("tcp:80", "'tcp:80': expected LISTEN=CONNECT"),
        ("tcp:0=unix:/x", "'tcp:0': expected tcp:PORT or unix:PATH"),
        ("udp:53=tcp:53", "'udp:53': expected tcp:PORT or unix:PATH"),
        ("tcp:1=unix:", "'unix:': expected tcp:PORT or unix:PATH"),
    ):
        with pytest.raises(ValueError) as refused:
            parse_pairs([spec])
        assert str(refused.value) == said
    out = subprocess.run(
        [sys.executable, "-m", "fakeplugin.cluster.bridge", "tcp:x=tcp:1"], capture_output=True, text=True
    )
    assert (out.returncode, out.stderr.strip()) == (2, "bridge: 'tcp:x': expected tcp:PORT or unix:PATH")


def test_keda_certificate_serves_the_service_names_and_authenticates_clients(tmp_path: Path) -> None:
    names = ["keda-metrics-apiserver.keda.svc", "keda-operator.keda.svc"]
    ca = serving_certificate(tmp_path, "127.0.0.1", names, client=True)
    assert ca == (tmp_path / "ca.crt").read_bytes()
    crt = str(tmp_path / "tls.crt")
    assert openssl_text("verify", "-CAfile", str(tmp_path / "ca.crt"), crt).strip().endswith(": OK")
    sans = openssl_text("x509", "-in", crt, "-noout", "-ext", "subjectAltName").splitlines()[-1].strip()
    assert sans == "IP Address:127.0.0.1, DNS:keda-metrics-apiserver.keda.svc, DNS:keda-operator.keda.svc"
    usage = openssl_text("x509", "-in", crt, "-noout", "-ext", "extendedKeyUsage").splitlines()[-1].strip()
    assert usage == "TLS Web Server Authentication, TLS Web Client Authentication"
    serving_certificate(tmp_path / "webhook", "127.0.0.1")  # Kueue's: a server only
    usage = openssl_text(
        "x509", "-in", str(tmp_path / "webhook" / "tls.crt"), "-noout", "-ext", "extendedKeyUsage"
    )
    assert usage.splitlines()[-1].strip() == "TLS Web Server Authentication"


def test_the_front_proxy_client_is_signed_by_its_ca_with_the_allowed_name(tmp_path: Path) -> None:
    layout = StateLayout(tmp_path)
    layout.pki.mkdir()
    front_proxy_certificates(layout)
    (_, ca), (_, crt) = components.front_proxy_ca(layout), components.front_proxy_client(layout)
    assert openssl_text("verify", "-CAfile", str(ca), str(crt)).strip().endswith(": OK")
    subject = openssl_text("x509", "-in", str(crt), "-noout", "-subject").strip()
    assert subject == f"subject=CN = {components.FRONT_PROXY_CLIENT}"
    usage = (
        openssl_text("x509", "-in", str(crt), "-noout", "-ext", "extendedKeyUsage").splitlines()[-1].strip()
    )
    assert usage == "TLS Web Client Authentication"
    # Every file the API server's aggregation flags name exists.
    flags = dict(a.removeprefix("--").split("=", 1) for a in components.aggregation_args(layout))
    assert flags["requestheader-allowed-names"] == components.FRONT_PROXY_CLIENT
    for name in (
        "client-ca-file",
        "requestheader-client-ca-file",
        "proxy-client-cert-file",
        "proxy-client-key-file",
    ):
        assert Path(flags[name]).is_file(), name


def test_keda_listens_on_loopback_only(tmp_path: Path) -> None:
    operator = keda.operator_argv(Path("/k/keda"), tmp_path, 1, 2, 3)
    adapter = keda.adapter_argv(Path("/k/keda-adapter"), tmp_path, tmp_path / "kc", 4, 3, 5)
    addresses = [a for a in operator + adapter if "address=" in a]
    assert sorted(addresses) == [
        "--bind-address=127.0.0.1",
        "--health-probe-bind-address=127.0.0.1:1",
        "--metrics-bind-address=127.0.0.1:2",
        "--metrics-service-address=127.0.0.1:3",
        "--metrics-service-bind-address=127.0.0.1:3",
    ]
    # The adapter's --port listener binds every interface: it runs in a network namespace of its own.
    assert "--port=5" in adapter
    assert "--enable-cert-rotation=false" in operator and "--enable-apiservice-patching=false" in operator
    assert keda.env(tmp_path / "kc")["WATCH_NAMESPACE"] == ""  # every namespace, as KEDA's manifests


def test_the_metrics_service_is_an_external_name_for_loopback() -> None:
    assert keda.service(6443) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "keda-metrics-apiserver", "namespace": "keda"},
        "spec": {
            "type": "ExternalName",
            "externalName": "127.0.0.1",
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        },
    }


@pytest.fixture
def keda_module() -> Path:
    try:
        return binaries.find_keda(versions.KEDA_VERSION)[2]
    except binaries.BinaryNotFound as exc:
        unavailable(str(exc))


@pytest.mark.build  # KEDA's module files, from hack/build-k8s.sh --only keda
def test_keda_manifests_from_its_module(keda_module: Path) -> None:
    manifest = keda.api_service(keda_module, 6443, b"CA")
    assert manifest["metadata"]["name"] == keda.API_SERVICE == "v1beta1.external.metrics.k8s.io"
    assert manifest["spec"]["service"] == {"name": keda.SERVICE, "namespace": keda.NAMESPACE, "port": 6443}
    assert base64.b64decode(manifest["spec"]["caBundle"]) == b"CA"
    kinds = sorted(c["spec"]["names"]["kind"] for c in keda.crds(keda_module))
    assert kinds == [
        "CloudEventSource",
        "ClusterCloudEventSource",
        "ClusterTriggerAuthentication",
        "ScaledJob",
        "ScaledObject",
        "TriggerAuthentication",
    ]
