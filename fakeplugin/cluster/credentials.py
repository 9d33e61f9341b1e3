"""A local cluster's credentials: one static admin token (token file + kubeconfig), the
service-account key pair, the aggregation layer's front-proxy CA and client certificate, and serving
certificates for what the API server calls back (Kueue's webhooks, KEDA's metrics API server).
Throwaway, loopback only; see fakeplugin.cluster.components."""

from __future__ import annotations

import logging
import secrets
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import components
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.state import ClusterError

log = logging.getLogger("fakeplugin.cluster")


def make_credentials(layout: StateLayout, server: str) -> None:
    """Admin token (token file + kubeconfig for `server`), the service-account key pair and the
    front-proxy certificates (openssl)."""
    pki = layout.pki
    pki.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    write_atomic(layout.token_file, components.token_file(token).encode(), mode=0o600)
    kubeconfig = yaml.safe_dump(components.kubeconfig(server, token))
    write_atomic(layout.kubeconfig, kubeconfig.encode(), mode=0o600)
    log.info("generating the service-account key pair in %s (openssl)", pki)
    openssl(
        ["genrsa", "-out", str(pki / "sa.key"), "2048"],
        ["rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
    )
    front_proxy_certificates(layout)


def front_proxy_certificates(layout: StateLayout) -> None:
    """What the API server's aggregation layer proxies with, as kubeadm makes it: a CA of its own
    (front-proxy-ca.crt, its --requestheader-client-ca-file) and a client certificate it signs, CN
    front-proxy-client (--proxy-client-cert-file/--proxy-client-key-file). An extension API server
    trusts the user the proxy names in its headers only from a certificate of that CA and that CN.
    And the cluster's client CA (components.aggregation_args says why)."""
    ca_key, ca_crt = components.front_proxy_ca(layout)
    key, crt = components.front_proxy_client(layout)
    signed_certificate(
        ca_key,
        ca_crt,
        key,
        crt,
        components.FRONT_PROXY_CLIENT,
        "extendedKeyUsage=clientAuth\n",
        "front-proxy-ca",
    )
    openssl(new_ca(*components.client_ca(layout), "fakeplugin-client-ca"))


def serving_certificate(out: Path, ip: str, dns_names: Sequence[str] = (), *, client: bool = False) -> bytes:
    """A CA and a serving certificate for `ip` (and `dns_names`) signed by it (tls.crt, tls.key in
    `out`, with the CA's ca.crt, ca.key), good as a client certificate too with `client`; returns the
    CA's PEM, for a webhook's or an APIService's caBundle."""
    out.mkdir(parents=True, exist_ok=True)
    names = ",".join([f"IP:{ip}", *(f"DNS:{name}" for name in dns_names)])
    usage = "serverAuth,clientAuth" if client else "serverAuth"
    ca_crt = out / "ca.crt"
    signed_certificate(
        out / "ca.key",
        ca_crt,
        out / "tls.key",
        out / "tls.crt",
        ip,
        f"subjectAltName={names}\nextendedKeyUsage={usage}\n",
        "fakeplugin-ca",
    )
    return ca_crt.read_bytes()


NEW_KEY = ["req", "-newkey", "rsa:2048", "-nodes"]


def new_ca(key: Path, crt: Path, cn: str) -> list[str]:
    """openssl's arguments for a new self-signed CA."""
    return [*NEW_KEY, "-x509", "-days", "3650", "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(crt)]


def signed_certificate(
    ca_key: Path, ca_crt: Path, key: Path, crt: Path, cn: str, extensions: str, ca_cn: str
) -> None:
    """A new CA (CN `ca_cn`) and a certificate for `cn` with `extensions` (openssl's extfile syntax)
    that it signs; the request and extension files are left beside `crt`."""
    csr, ext = crt.with_suffix(".csr"), crt.with_suffix(".ext")
    ext.write_text(extensions)
    sign = ["x509", "-req", "-days", "3650", "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial"]
    openssl(
        new_ca(ca_key, ca_crt, ca_cn),
        [*NEW_KEY, "-subj", f"/CN={cn}", "-keyout", str(key), "-out", str(csr)],
        [*sign, "-in", str(csr), "-extfile", str(ext), "-out", str(crt)],
    )


def openssl(*commands: list[str]) -> None:
    """Run `openssl <command>` for each, in order; ClusterError with openssl's message on a failure."""
    for command in commands:
        argv = ["openssl", *command]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
