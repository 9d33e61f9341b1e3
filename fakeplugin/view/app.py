"""The view as a host runs it: the watches over the API and the server on its endpoint, until `stop`."""

from __future__ import annotations

import threading

from fakeplugin.kube import Kube
from fakeplugin.view.objects import kinds
from fakeplugin.view.server import DEFAULT_MAX_CLIENTS, ViewServer, parse_endpoint
from fakeplugin.view.store import FleetStore, Watches


def start_view(
    kube: Kube,
    endpoint: str,
    *,
    gpu_driver: str,
    cd_driver: str,
    stop: threading.Event,
    group_label: str = "",
    max_clients: int = DEFAULT_MAX_CLIENTS,
    what: str = "--view-endpoint",
) -> ViewServer:
    """Watch the cluster through `kube` and serve the page on `endpoint` (HOST:PORT; ValueError names
    `what`); the server is closed when `stop` is set."""
    host, port = parse_endpoint(endpoint, what)
    store = FleetStore(kinds(gpu_driver, cd_driver), group_label=group_label)
    try:
        server = ViewServer(store, host, port, max_clients=max_clients).start()
    except OSError as exc:  # the port is taken, the address is not this machine's
        raise ValueError(f"{what} {endpoint}: {exc.strerror or exc}") from exc
    Watches(kube, store).start(stop)
    threading.Thread(target=lambda: (stop.wait(), server.close()), name="view-stop", daemon=True).start()
    return server
