"""Starting a host's telemetry endpoint from its flags (`serve`, `fleet`): fatal problems at start."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from fakeplugin.telemetry import counters as counters_file
from fakeplugin.telemetry.endpoint import Endpoint, parse_endpoint
from fakeplugin.telemetry.samples import is_simulated
from fakeplugin.telemetry.source import Attribution, NodeView, Telemetry

log = logging.getLogger(__name__)


def start_endpoint(
    endpoint: str, counters: str, nodes: Callable[[], Sequence[NodeView]], attribution: Attribution
) -> Endpoint:
    """Serve `/metrics` on `endpoint` (--telemetry-endpoint) with the counters of the file `counters`
    (--telemetry-counters; empty: the default). ValueError (CountersError) names the flag or file line;
    OSError: the address cannot be bound."""
    host, port = parse_endpoint(endpoint)
    chosen = counters_file.load(Path(counters) if counters else None)
    quiet = [c.field for c in chosen if not is_simulated(c)]
    if quiet:
        log.warning(
            "telemetry: fakeplugin does not simulate %s: no series for them (as DCGM's blank values)",
            ", ".join(quiet),
        )
    telemetry = Telemetry(nodes, attribution, chosen)
    server = Endpoint(telemetry.render, host, port).start()
    log.info(
        "telemetry (dcgm-exporter %s) on http://%s:%d/metrics, %d counters from %s",
        counters_file.EXPORTER_RELEASE,
        host,
        server.port,
        len(chosen),
        counters or "the default set",
    )
    return server
