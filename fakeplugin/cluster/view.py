"""The fleet view on a local cluster (`cluster up --view-endpoint HOST:PORT`): `fakeplugin view` as one more
supervised process (`view`), against the admin kubeconfig, waited for until its watches have listed
(/healthz); its URL is kept in cluster.json (`cluster status`, `Cluster.view_url`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import fakeplugin
from fakeplugin.cluster import components
from fakeplugin.cluster.machine import free_ports
from fakeplugin.cluster.state import StateStore
from fakeplugin.cluster.supervisor import Supervisor
from fakeplugin.view.server import parse_endpoint

NAME = "view"


class View:
    def __init__(self, store: StateStore, processes: Supervisor) -> None:
        self._store, self._processes = store, processes

    def start(self, endpoint: str) -> str:
        """Start the view at `endpoint` (PORT 0: a free port); its URL, once it answers."""
        host, port = parse_endpoint(endpoint)
        port = port or free_ports(1)[0]
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        argv = [sys.executable, "-m", "fakeplugin", "view"]
        argv += [f"--kubeconfig={self._store.layout.kubeconfig}", f"--endpoint={address}"]
        env = components.python_env(os.environ, Path(fakeplugin.__file__).resolve().parents[1])
        self._processes.launch(NAME, [argv], env=env)
        url = f"http://{address}/"
        self._processes.wait_http(NAME, f"{url}healthz")
        state = self._store.require()
        state.view_url = url
        self._store.save()
        return url
