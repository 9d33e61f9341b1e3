"""fakeplugin.kube's requests on a kept-alive connection per thread, against a real HTTPS server.

The server here is Python's own (http.server over TLS with a certificate for 127.0.0.1 signed by a CA made
with openssl): what the transport sends, what it does with answers, with a connection the server closed
while it was idle, and with a certificate that does not name the host it was asked for.
"""

from __future__ import annotations

import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from fakeplugin.cluster.credentials import serving_certificate
from fakeplugin.kube import Kube, new_api_client

CLAIM_PATH = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c-1"
IDLE_SECONDS = 0.05


class Recorder(BaseHTTPRequestHandler):
    """Answers a claim GET with the claim, anything else with a 404 Status; records each request and the
    connection (client port) it came on. `close_after` closes the connection after that many answers."""

    protocol_version = "HTTP/1.1"  # kept alive unless closed
    requests: list[dict[str, Any]]
    close_after = 0
    shut_idle = False  # close the connection abortively (no TLS close_notify, an RST) once it is idle

    def do_GET(self) -> None:
        self.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "port": self.client_address[1]}
        )
        if self.path == CLAIM_PATH:
            status, body = 200, {"kind": "ResourceClaim", "metadata": {"name": "c-1", "uid": "u-1"}}
        else:
            status, body = 404, {"kind": "Status", "message": f"{self.path} not found", "code": 404}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if self.close_after and len(self.requests) % self.close_after == 0:
            self.close_connection = True  # as an API server closing an idle connection
        if self.shut_idle:
            threading.Timer(IDLE_SECONDS, self._abort).start()

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append({"path": self.path, "body": body, "port": self.client_address[1]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _abort(self) -> None:
        # Linger 0: the close that follows the shutdown resets the connection, as the CI's API server did.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[ThreadingHTTPServer, Path]]:
    pki = tmp_path / "pki"
    serving_certificate(pki, "127.0.0.1")
    handler = type("Handler", (Recorder,), {"requests": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki / "tls.crt", pki / "tls.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, pki / "ca.crt"
    httpd.shutdown()
    httpd.server_close()


def kubeconfig(path: Path, server: str, ca: Path | None) -> str:
    cluster: dict[str, Any] = {"server": server}
    cluster.update({"certificate-authority": str(ca)} if ca else {"insecure-skip-tls-verify": True})
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return str(path)


def kube_of(httpd: ThreadingHTTPServer, config: Path, *, host: str = "127.0.0.1", ca: Path | None) -> Kube:
    """A Kube for the server at `host` (its port), through a kubeconfig written to `config`."""
    return Kube(new_api_client(kubeconfig(config, f"https://{host}:{httpd.server_address[1]}", ca)))


def requests_to(httpd: ThreadingHTTPServer) -> list[dict[str, Any]]:
    return httpd.RequestHandlerClass.requests  # type: ignore[attr-defined,no-any-return]


def test_a_claim_get_is_sent_with_the_clients_auth_and_answered_on_one_kept_connection(
    server: tuple[ThreadingHTTPServer, Path], tmp_path: Path
) -> None:
    httpd, ca = server
    kube = kube_of(httpd, tmp_path / "kc", ca=ca)
    for _ in range(3):
        assert kube.get_claim("ns", "c-1")["metadata"] == {"name": "c-1", "uid": "u-1"}
    seen = requests_to(httpd)
    assert [r["path"] for r in seen] == [CLAIM_PATH] * 3
    assert {r["auth"] for r in seen} == {"Bearer secret-token"}
    assert len({r["port"] for r in seen}) == 1  # one connection, kept alive

    with pytest.raises(ApiException) as caught:
        kube.get_claim("ns", "missing")
    assert caught.value.status == 404
    assert "resourceclaims/missing not found" in (caught.value.body or "")


def test_a_connection_the_server_closed_is_opened_again(
    server: tuple[ThreadingHTTPServer, Path], tmp_path: Path
) -> None:
    httpd, ca = server
    httpd.RequestHandlerClass.close_after = 1  # type: ignore[attr-defined]
    kube = kube_of(httpd, tmp_path / "kc", ca=ca)
    for _ in range(3):
        assert kube.get_claim("ns", "c-1")["metadata"]["uid"] == "u-1"
    seen = requests_to(httpd)
    assert len(seen) == 3 and len({r["port"] for r in seen}) == 3


def test_a_tls_connection_reset_while_idle_is_not_used_again(
    server: tuple[ThreadingHTTPServer, Path], tmp_path: Path
) -> None:
    """The CI failure of stop 37: a write into a TLS connection the server had shut down while idle raised
    ssl.SSLEOFError on every worker thread's connection in turn, and a pod was never unprepared."""
    httpd, ca = server
    httpd.RequestHandlerClass.shut_idle = True  # type: ignore[attr-defined]
    kube = kube_of(httpd, tmp_path / "kc", ca=ca)
    for _ in range(3):
        assert kube.get_claim("ns", "c-1")["metadata"]["uid"] == "u-1"
        time.sleep(4 * IDLE_SECONDS)
    seen = requests_to(httpd)
    assert len(seen) == 3 and len({r["port"] for r in seen}) == 3


def test_the_certificate_must_name_the_host_as_the_clients_own_pool_checks(
    server: tuple[ThreadingHTTPServer, Path], tmp_path: Path
) -> None:
    httpd, ca = server
    # The certificate names 127.0.0.1, not localhost.
    kube = kube_of(httpd, tmp_path / "kc", host="localhost", ca=ca)
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        kube.get_claim("ns", "c-1")
    unverified = kube_of(httpd, tmp_path / "kc2", host="localhost", ca=None)
    assert unverified.get_claim("ns", "c-1")["metadata"]["name"] == "c-1"
    assert len(requests_to(httpd)) == 1


def test_a_body_is_sent_as_go_writes_it_compact_and_in_utf8(
    server: tuple[ThreadingHTTPServer, Path], tmp_path: Path
) -> None:
    """So opaque parameters read and written back keep the bytes kubectl stored (kube.encode)."""
    httpd, ca = server
    kube = kube_of(httpd, tmp_path / "kc", ca=ca)
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "note": "größe"}
    assert kube.replace(f"{CLAIM_PATH}/status", {"z": 1, "params": params})["params"] == params
    [put] = requests_to(httpd)
    expected = (
        '{"z":1,"params":{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig","note":"größe"}}'
    )
    assert put["path"] == f"{CLAIM_PATH}/status" and put["body"] == expected.encode()
