"""A local cluster's credentials: one static admin token (token file + kubeconfig) and the
service-account key pair. Throwaway, loopback only; see fakeplugin.cluster.components."""

from __future__ import annotations

import logging
import secrets
import subprocess

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
    for argv in (
        ["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"],
        ["openssl", "rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")],
    ):
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
