"""A local cluster's credentials: one static admin token (token file + kubeconfig), the
service-account key pair, and serving certificates for what the API server calls back (Kueue's
webhooks). Throwaway, loopback only; see fakeplugin.cluster.components."""

from __future__ import annotations

import logging
import secrets
import subprocess
from pathlib import Path

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.cluster import components
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.state import ClusterError

log = logging.getLogger("fakeplugin.cluster")


def make_credentials(layout: StateLayout, server: str) -> None:
    """Admin token (token file + kubeconfig for `server`) and the service-account key pair (openssl)."""
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


def serving_certificate(out: Path, ip: str) -> bytes:
    """A CA and a serving certificate for `ip` signed by it (tls.crt, tls.key in `out`, with the CA's
    ca.crt, ca.key); returns the CA's PEM, for a webhook's caBundle."""
    out.mkdir(parents=True, exist_ok=True)
    ext = out / "server.ext"
    ext.write_text(f"subjectAltName=IP:{ip}\nextendedKeyUsage=serverAuth\n")
    ca_key, ca_crt, key, csr, crt = (
        str(out / n) for n in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt")
    )
    new_key = ["req", "-newkey", "rsa:2048", "-nodes"]
    openssl(
        [*new_key, "-x509", "-days", "3650", "-subj", "/CN=fakeplugin-ca", "-keyout", ca_key, "-out", ca_crt],
        [*new_key, "-subj", f"/CN={ip}", "-keyout", key, "-out", csr],
        [
            "x509",
            "-req",
            "-in",
            csr,
            "-days",
            "3650",
            "-CA",
            ca_crt,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-extfile",
            str(ext),
            "-out",
            crt,
        ],
    )
    return Path(ca_crt).read_bytes()


def openssl(*commands: list[str]) -> None:
    """Run `openssl <command>` for each, in order; ClusterError with openssl's message on a failure."""
    for command in commands:
        argv = ["openssl", *command]
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
