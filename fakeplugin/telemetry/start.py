"""Starting a host's telemetry endpoint from its flags (`serve`, `fleet`): fatal problems at start."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from fakeplugin.telemetry import counters as counters_file
from fakeplugin.telemetry.endpoint import Endpoint, parse_endpoint
from fakeplugin.telemetry.exporters import exporter_release
from fakeplugin.telemetry.samples import is_simulated
from fakeplugin.telemetry.source import Attribution, NodeView, Telemetry

log = logging.getLogger(__name__)


def start_endpoint(
    args: argparse.Namespace, nodes: Callable[[], Sequence[NodeView]], attribution: Attribution
) -> Endpoint:
    """Serve `/metrics` on --telemetry-endpoint with the counters of --telemetry-counters (empty: the
    default) as the dcgm-exporter release --telemetry-exporter-release renders them, with pod_uid where
    --kubernetes-enable-pod-uid and the release say. ValueError (CountersError) names the flag or file
    line; OSError: the address cannot be bound."""
    host, port = parse_endpoint(args.telemetry_endpoint)
    release = exporter_release(args.telemetry_exporter_release)
    counters = args.telemetry_counters
    chosen = counters_file.load(Path(counters) if counters else None)
    quiet = [c.field for c in chosen if not is_simulated(c, release)]
    if quiet:
        log.warning(
            "telemetry: fakeplugin does not simulate %s: no series for them (as DCGM's blank values)",
            ", ".join(quiet),
        )
    telemetry = Telemetry(nodes, attribution, chosen, release=release, pod_uid=args.kubernetes_enable_pod_uid)
    server = Endpoint(telemetry.render, host, port).start()
    log.info(
        "telemetry (dcgm-exporter %s) on http://%s:%d/metrics, %d counters from %s",
        release.name,
        host,
        server.port,
        len(chosen),
        counters or "the default set",
    )
    return server
