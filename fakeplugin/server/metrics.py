"""Prometheus metrics under NVIDIA's driver names (v0.4+), served on `serve --http-endpoint`.

prometheus-client does the exposition format and the HTTP server; we only name and count.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Counter, Gauge, Histogram, start_http_server

REQUESTS = Counter("nvidia_dra_requests", "DRA gRPC requests handled", ["driver", "operation"])
DURATION = Histogram(
    "nvidia_dra_request_duration_seconds", "DRA gRPC request duration", ["driver", "operation"]
)
INFLIGHT = Gauge("nvidia_dra_requests_inflight", "DRA gRPC requests being handled", ["driver", "operation"])
PREPARE_ERRORS = Counter(
    "nvidia_dra_node_prepare_errors", "Claims whose NodePrepareResources failed", ["driver", "error_type"]
)
UNPREPARE_ERRORS = Counter(
    "nvidia_dra_node_unprepare_errors", "Claims whose NodeUnprepareResources failed", ["driver", "error_type"]
)


@contextmanager
def request(driver: str, operation: str) -> Iterator[None]:
    """Count one request of `operation` (the RPC name), its duration and while it runs."""
    REQUESTS.labels(driver, operation).inc()
    inflight = INFLIGHT.labels(driver, operation)
    inflight.inc()
    started = time.perf_counter()
    try:
        yield
    finally:
        DURATION.labels(driver, operation).observe(time.perf_counter() - started)
        inflight.dec()


def serve(endpoint: str) -> int:
    """Serve /metrics on `endpoint` ("host:port" or ":port" for all addresses); returns the bound port."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--http-endpoint {endpoint!r}: expected HOST:PORT or :PORT, e.g. :8080")
    server, _ = start_http_server(int(port), addr=host or "0.0.0.0")
    return int(server.server_address[1])
