"""Prometheus metrics under NVIDIA's driver names (v0.4+), served on `serve --http-endpoint`.

prometheus-client does the exposition format and the HTTP server; we only name and count. It is imported
only when metrics are served (`serve`): about 4 MiB of RSS every plugin without --http-endpoint saves.
Until then `request`, `prepare_errors` and `unprepare_errors` count nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_metrics: dict[str, Any] = {}  # name → prometheus-client metric, once `serve` ran


def _create() -> None:
    from prometheus_client import Counter, Gauge, Histogram

    labels = ["driver", "operation"]
    _metrics.update(
        requests=Counter("nvidia_dra_requests", "DRA gRPC requests handled", labels),
        duration=Histogram("nvidia_dra_request_duration_seconds", "DRA gRPC request duration", labels),
        inflight=Gauge("nvidia_dra_requests_inflight", "DRA gRPC requests being handled", labels),
        prepare_errors=Counter(
            "nvidia_dra_node_prepare_errors",
            "Claims whose NodePrepareResources failed",
            ["driver", "error_type"],
        ),
        unprepare_errors=Counter(
            "nvidia_dra_node_unprepare_errors",
            "Claims whose NodeUnprepareResources failed",
            ["driver", "error_type"],
        ),
    )


@contextmanager
def request(driver: str, operation: str) -> Iterator[None]:
    """Count one request of `operation` (the RPC name), its duration and while it runs."""
    if not _metrics:
        yield
        return
    _metrics["requests"].labels(driver, operation).inc()
    inflight = _metrics["inflight"].labels(driver, operation)
    inflight.inc()
    started = time.perf_counter()
    try:
        yield
    finally:
        _metrics["duration"].labels(driver, operation).observe(time.perf_counter() - started)
        inflight.dec()


def prepare_errors(driver: str, failed: int) -> None:
    if _metrics:
        _metrics["prepare_errors"].labels(driver, "prepare_devices").inc(failed)


def unprepare_errors(driver: str, failed: int) -> None:
    if _metrics:
        _metrics["unprepare_errors"].labels(driver, "unprepare_devices").inc(failed)


def serve(endpoint: str) -> int:
    """Serve /metrics on `endpoint` ("host:port" or ":port" for all addresses); returns the bound port."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--http-endpoint {endpoint!r}: expected HOST:PORT or :PORT, e.g. :8080")
    from prometheus_client import start_http_server

    if not _metrics:
        _create()
    server, _ = start_http_server(int(port), addr=host or "0.0.0.0")
    return int(server.server_address[1])
