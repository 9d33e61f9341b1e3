"""The `/metrics` HTTP endpoint (`--telemetry-endpoint`): bounded, shared renders, loopback by default.

Invariants:
- at most `max_connections` requests are handled at once; one more is answered 503 at once by the
  accepting thread (a few bytes, no handler thread), so a crowd of scrapers costs bounded threads and memory;
- one render serves every scrape within `interval` seconds of it: concurrent scrapes wait for the render
  under way instead of starting their own (a fleet's render is the endpoint's whole cost);
- a render is kept gzip-compressed only, compressed block by block as it is made (a fleet of 1000 nodes x
  8 GPUs is 41 MiB of text, 6-8 MiB compressed): a scraper that accepts gzip (Prometheus does) gets it as
  it is, any other one a copy decompressed piece by piece while it is sent, so no whole text is held;
- a request line or header over the standard library's limits, or a client slower than `timeout`
  seconds, ends its connection; nothing a client sends is kept.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from fakeplugin.boundedhttp import BoundedHTTPServer, busy_response
from fakeplugin.telemetry.exposition import CONTENT_TYPE

log = logging.getLogger(__name__)

DEFAULT_PORT = 9400  # dcgm-exporter's (pkg/cmd/app.go --address ":9400")
DEFAULT_INTERVAL = 1.0
DEFAULT_MAX_CONNECTIONS = 16
_BUSY = busy_response(b"too many concurrent scrapes; try again\n")


def parse_endpoint(value: str) -> tuple[str, int]:
    """`HOST:PORT` → (host, port); `:PORT` is loopback (127.0.0.1): all addresses need 0.0.0.0:PORT.
    ValueError names the flag."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(
            f"--telemetry-endpoint {value!r}: expected HOST:PORT, e.g. 127.0.0.1:{DEFAULT_PORT} "
            f"(:PORT is loopback; 0.0.0.0:PORT every address)"
        )
    return host or "127.0.0.1", int(port)


_GZIP = 31  # zlib's wbits for the gzip container
_PIECE = 256 * 1024  # what a plain scrape decompresses and sends at a time


@dataclass(frozen=True)
class Body:
    """One render, gzip-compressed; `size`: its length uncompressed."""

    gzip: bytes
    size: int

    @classmethod
    def of(cls, blocks: Iterable[bytes | bytearray]) -> Body:
        # Level 1: a fleet's text compresses about 7-fold either way, level 6 takes 3-4 times longer.
        compressor = zlib.compressobj(1, zlib.DEFLATED, _GZIP)
        parts, size = [], 0
        for block in blocks:
            size += len(block)
            parts.append(compressor.compress(block))
        parts.append(compressor.flush())
        return cls(b"".join(parts), size)

    def text(self) -> Iterable[bytes]:
        """The text, piece by piece (each at most _PIECE bytes)."""
        decompressor = zlib.decompressobj(_GZIP)
        for at in range(0, len(self.gzip), _PIECE):
            data = self.gzip[at : at + _PIECE]
            while data:
                yield decompressor.decompress(data, _PIECE)
                data = decompressor.unconsumed_tail
        yield decompressor.flush()


class SharedRender:
    """`render()` (the exposition, block by block) once per `interval`, its Body shared by every caller
    meanwhile."""

    def __init__(
        self,
        render: Callable[[], Iterable[bytes | bytearray]],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._render = render
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._body = Body(b"", 0)
        self._at: float | None = None

    def get(self) -> Body:
        with self._lock:  # a caller arriving during a render waits for it and takes its result
            now = self._clock()
            if self._at is None or now - self._at >= self._interval:
                self._body = Body(b"", 0)  # the old one freed before the new one is made
                self._body = Body.of(self._render())
                self._at = self._clock()
            return self._body


class _Server(BoundedHTTPServer):
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], shared: SharedRender, max_connections: int, timeout: float):
        self.shared = shared
        self.request_timeout = timeout
        super().__init__(address, _Handler, max_connections, _BUSY)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.timeout = self.server.request_timeout
        super().setup()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.server.shared.get()
            except Exception as exc:  # a bug in a render: this scrape fails, the endpoint stays up
                log.exception("telemetry: render failed")
                self._send(500, f"render failed: {exc}\n".encode(), CONTENT_TYPE)
                return
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                self._send(200, body.gzip, CONTENT_TYPE, {"Content-Encoding": "gzip"})
            else:
                self._start(200, body.size, CONTENT_TYPE, {})
                for piece in body.text():
                    self.wfile.write(piece)
        elif path in ("/", "/health"):
            self._send(200, b"OK" if path == "/health" else b"fakeplugin telemetry: /metrics\n", CONTENT_TYPE)
        else:
            self._send(404, b"not found: /metrics is the only page\n", CONTENT_TYPE)

    def _send(self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self._start(code, len(body), content_type, headers or {})
        self.wfile.write(body)

    def _start(self, code: int, length: int, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("X-Content-Type-Options", "nosniff")  # as the exporter's server.go
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("telemetry %s: " + format, self.address_string(), *args)


class Endpoint:
    """The HTTP server of `render` on `host:port` (port 0: any free one, see `port`)."""

    def __init__(
        self,
        render: Callable[[], Iterable[bytes | bytearray]],
        host: str,
        port: int,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        timeout: float = 10.0,
    ) -> None:
        self.shared = SharedRender(render, interval)
        self._server = _Server((host, port), self.shared, max_connections, timeout)
        self._thread = threading.Thread(target=self._server.serve_forever, name="telemetry-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> Endpoint:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
