"""A threading HTTP server with a cap on the connections it handles at once: the telemetry endpoint's and
the fleet view's.

Invariant: at most `max_connections` handler threads run; one connection more is answered `busy` (a
complete HTTP response, a few bytes) by the accepting thread and closed, so a crowd of clients costs
bounded threads and memory.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def busy_response(body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    """A whole `503 Service Unavailable` response with `body`, asking to retry in a second."""
    return (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: %s\r\nRetry-After: 1\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (content_type.encode(), len(body), body)
    )


class BoundedHTTPServer(ThreadingHTTPServer):
    """`handler` on `address` (IPv4 or IPv6 by the host's form), at most `max_connections` at once."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int,
        busy: bytes,
    ) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        self._busy = busy
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(self._busy)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()
