"""The view's HTTP server (stdlib): the page, its JSON and its event stream. Read-only: GET and HEAD,
any other method 405. Bounded: at most `max_clients` connections at once (event streams included); one
more gets 503 at once, never a queue.

    /                       the page (static/index.html; view.js and view.css beside it, no CDN)
    /api/summary            totals, groups, racks and ComputeDomains (model.FleetModel.summary)
    /api/nodes?group=&rack=&state=&q=&offset=&limit=
                            a page of nodes with their GPUs (default 50, at most 1000 nodes)
    /api/nodes/<name>       one node
    /api/events             Server-Sent Events: `change` with the new version each time the watches
                            saw a change (at most every EVENT_INTERVAL per client), a comment every
                            KEEPALIVE seconds
    /healthz                200 once every watch has listed, else 503
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from fakeplugin.boundedhttp import BoundedHTTPServer, busy_response
from fakeplugin.view.model import PAGE_SIZE, STATES, Query
from fakeplugin.view.store import FleetStore

log = logging.getLogger(__name__)

DEFAULT_MAX_CLIENTS = 32
EVENT_INTERVAL = 0.25  # seconds: a burst of changes is one event per client per interval
KEEPALIVE = 15.0
GONE_CHECK = 1.0  # seconds: how soon an event stream whose client left frees its slot
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/view.js": ("view.js", "text/javascript; charset=utf-8"),
    "/view.css": ("view.css", "text/css; charset=utf-8"),
}


def parse_endpoint(value: str, what: str = "--view-endpoint") -> tuple[str, int]:
    """HOST:PORT (PORT 0: any free one) → (host, port); ValueError names `what`."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{what}: {value!r}: expected HOST:PORT, e.g. 127.0.0.1:8470")
    return host.strip("[]"), int(port)


def query_of(params: dict[str, list[str]]) -> Query:
    """A page's Query from its URL parameters; ValueError says which one is bad."""

    def one(name: str) -> str:
        return (params.get(name) or [""])[-1]

    def number(name: str, default: int) -> int:
        text = one(name) or str(default)
        if not text.isdigit():
            raise ValueError(f"{name}: {text!r}: expected a whole number")
        return int(text)

    state = one("state")
    if state and state not in STATES:
        raise ValueError(f"state: {state!r}: expected one of {', '.join(STATES)}")
    return Query(
        group=one("group"),
        rack=one("rack"),
        state=state,
        text=one("q"),
        offset=number("offset", 0),
        limit=number("limit", PAGE_SIZE),
    )


class _Server(BoundedHTTPServer):
    block_on_close = False

    def __init__(self, address: tuple[str, int], store: FleetStore, max_clients: int) -> None:
        self.store = store
        self.closing = threading.Event()
        super().__init__(address, _Handler, max_clients, busy_response(b"too many clients (cap)"))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "fakeplugin-view"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def __getattr__(self, name: str) -> Callable[[], None]:
        if name.startswith("do_"):  # every method but GET and HEAD
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(
            HTTPStatus.METHOD_NOT_ALLOWED, b"read-only: GET and HEAD only\n", "text/plain", Allow="GET, HEAD"
        )

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = url.path
        try:
            if path in STATIC:
                name, content_type = STATIC[path]
                body = resources.files(__package__).joinpath("static", name).read_bytes()
                self._send(HTTPStatus.OK, body, content_type)
            elif path == "/healthz":
                ok = self.server.store.synced
                self._send(
                    HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                    b"ok\n" if ok else b"listing\n",
                    "text/plain",
                )
            elif path == "/api/summary":
                self._json(self.server.store.model().summary)
            elif path == "/api/nodes":
                self._json(self.server.store.model().page(query_of(parse_qs(url.query))))
            elif path.startswith("/api/nodes/"):
                node = self.server.store.model().node(unquote(path.removeprefix("/api/nodes/")))
                if node is None:
                    self._send(HTTPStatus.NOT_FOUND, b"no such node\n", "text/plain")
                else:
                    self._json(node)
            elif path == "/api/events":
                self._events()
            else:
                self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
        except ValueError as exc:
            self._send(HTTPStatus.BAD_REQUEST, f"{exc}\n".encode(), "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left

    def _json(self, data: Any) -> None:
        self._send(HTTPStatus.OK, json.dumps(data, separators=(",", ":")).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _events(self) -> None:
        """Until the client leaves or the server closes: the version at once, then each change."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if self.command == "HEAD":
            return
        store, closing = self.server.store, self.server.closing
        seen = store.version
        self._event(seen)
        sent, quiet = 0.0, time.monotonic()  # the first change goes out at once
        while not closing.is_set() and not self._client_gone():
            version = store.wait_change(seen, GONE_CHECK)
            if version == seen:
                if time.monotonic() - quiet >= KEEPALIVE:
                    self.wfile.write(b": keepalive\n\n")
                    self.wfile.flush()
                    quiet = time.monotonic()
                continue
            closing.wait(max(0.0, EVENT_INTERVAL - (time.monotonic() - sent)))
            seen = store.version
            self._event(seen)
            sent = quiet = time.monotonic()

    def _client_gone(self) -> bool:
        """Whether the client closed its end (readable, and nothing to read): its slot is freed at once
        instead of at the next write."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _event(self, version: int) -> None:
        self.wfile.write(f"event: change\ndata: {json.dumps({'version': version})}\n\n".encode())
        self.wfile.flush()


class ViewServer:
    """The page's server on `host`:`port` (0: a free port; `address` says which), serving `store`."""

    def __init__(
        self, store: FleetStore, host: str, port: int, *, max_clients: int = DEFAULT_MAX_CLIENTS
    ) -> None:
        if max_clients < 1:
            raise ValueError(f"max clients: {max_clients}: must be at least 1")
        self._server = _Server((host, port), store, max_clients)
        self._thread = threading.Thread(target=self._server.serve_forever, name="view-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def start(self) -> ViewServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.closing.set()
        self._server.store.wake()  # event streams end now, not at their next keepalive
        self._server.shutdown()
        self._server.server_close()
