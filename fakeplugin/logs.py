"""Logging setup shared by every command: readable lines, klog-like verbosity numbers."""

from __future__ import annotations

import logging
import sys

# klog-style verbosity: 0-3 info, 4-5 debug, 6+ also logs every gRPC request and response.
GRPC_TRACE_LEVEL = 6


def setup(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 4 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", datefmt="%Y-%m-%dT%H:%M:%S")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Third-party libraries stay quiet unless asked for everything.
    for noisy in ("urllib3", "kubernetes", "asyncio", "grpc"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbosity >= GRPC_TRACE_LEVEL else logging.WARNING)
