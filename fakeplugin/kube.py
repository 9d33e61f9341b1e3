"""The Kubernetes API edge: building a client, reading nodes and claims, writing ResourceSlices.

Objects are plain dicts in API shape, so no field is ever lost in a model class. Requests go through
the official client's `ApiClient` (kubeconfig and in-cluster auth, token refresh, TLS, its urllib3
connection pool) at the REST level: the generated API classes are not used. Importing
`kubernetes.client.api.core_v1_api` alone costs about 21 MiB of RSS and most of a second, and every
generated method validates its arguments with pydantic; for the few calls the plugin (and
`fakeplugin fault`) makes, a path and a json.loads are all that is needed (bench/import_cost.py,
docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import re
import select
import ssl
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3
from kubernetes import config
from kubernetes.client.api_client import ApiClient
from kubernetes.client.configuration import Configuration
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.util.ssl_ import create_urllib3_context

log = logging.getLogger(__name__)

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
SLICES = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceslices"
NODES = "/api/v1/nodes"

Obj = dict[str, Any]
# Lists of metadata only (names, labels, ...): a fraction of the full objects (apimachinery's
# PartialObjectMetadataList, as `kubectl get -o name` asks).
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io,application/json"
# Every call carries a deadline: a hung API server must never hang Prepare or the publisher.
REQUEST_TIMEOUT = 15.0
# The auth schemes the generated API classes pass for every call (a bearer token, when there is one;
# client certificates live in the connection pool).
AUTH_SETTINGS = ["BearerToken"]


def new_api_client(kubeconfig: str | None, *, connections: int = 8) -> ApiClient:
    """A client from `kubeconfig`, else the in-cluster service account, else ~/.kube/config.

    `connections`: how many connections the pool keeps open, at least the number of threads calling at
    once. Beyond it urllib3 opens a new connection per call and drops it afterwards: a TLS handshake (and
    the CA bundle loaded again) per Prepare, which cost concurrent Prepares most of their time.
    """
    configuration = Configuration()
    if kubeconfig:
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        except (config.ConfigException, OSError) as exc:
            raise ValueError(f"kubeconfig {kubeconfig}: {exc}") from exc
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException:
            config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = connections
    api = ApiClient(configuration=configuration)
    _share_tls_context(api)
    if not api.configuration.verify_ssl:
        # Said once here instead of a urllib3 warning on every request.
        log.warning("the kubeconfig disables TLS verification of %s", api.configuration.host)
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    return api


def _share_tls_context(api: ApiClient) -> None:
    """One TLS context, with the CA and the client certificate loaded once, for every pooled connection.

    Left to itself urllib3 makes a context per connection and loads the certificates into each; without a
    CA of the kubeconfig's own it loads the system's whole CA bundle into each: about 1 MiB of RSS per
    connection (12 concurrent claim GETs: +10.8 MiB; docs/benchmarks.md, issue 21). The pool's arguments
    are the client's own (kubernetes.client.rest); the pool then only sets the same verify mode on it.
    """
    kw = api.rest_client.pool_manager.connection_pool_kw
    context = create_urllib3_context(cert_reqs=kw["cert_reqs"])
    _load_certificates(
        context,
        ca_file=kw.pop("ca_certs", None),
        ca_data=kw.pop("ca_cert_data", None),
        cert_file=kw.pop("cert_file", None),
        key_file=kw.pop("key_file", None),
    )
    kw["ssl_context"] = context


def _load_certificates(
    context: ssl.SSLContext,
    *,
    ca_file: str | None,
    ca_data: str | None,
    cert_file: str | None,
    key_file: str | None,
) -> None:
    """The kubeconfig's CA (else the system's, when verifying) and client certificate, into `context`."""
    if ca_file or ca_data:
        context.load_verify_locations(cafile=ca_file, cadata=ca_data)
    elif context.verify_mode != ssl.CERT_NONE:
        context.load_default_certs()  # as urllib3 does when no CA is given
    if cert_file:
        context.load_cert_chain(cert_file, key_file)


# What a request on a kept-alive connection the server closed meanwhile raises: a plain connection's
# EOF or reset; over TLS, the EOF without close_notify that a write into the closed socket gets.
_STALE = (http.client.RemoteDisconnected, ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


class _Direct:
    """Requests with a JSON answer on one kept-alive `http.client` connection per calling thread: what the
    official client's urllib3 pool does for them at about half the CPU (a claim GET: 0.5 → 0.2 ms of the
    caller's CPU, docs/benchmarks.md, issue 32). The client still makes every request's URL and headers
    (`ApiClient.param_serialize`: auth, token refresh); only the transport is ours. Its TLS context is the
    pool's, with the host name checked in the handshake where the pool checks it itself.

    `for_client` gives None where the pool does more than a plain connection (a proxy, a TLS server name
    or host check of the kubeconfig's own): those requests stay on the pool.
    """

    def __init__(self, host: str, context: ssl.SSLContext | None) -> None:
        parts = urlsplit(host)
        self._https = parts.scheme == "https"
        self._host, self._port = parts.hostname or "", parts.port
        self._context = context
        self._local = threading.local()

    @classmethod
    def for_client(cls, api: ApiClient) -> _Direct | None:
        cfg = api.configuration
        if (
            isinstance(api.rest_client.pool_manager, urllib3.ProxyManager)
            or cfg.assert_hostname is not None
            or cfg.tls_server_name
            or not cfg.host.startswith(("https://", "http://"))
        ):
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
        if not cfg.verify_ssl:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        _load_certificates(
            context,
            ca_file=cfg.ssl_ca_cert,
            ca_data=cfg.ca_cert_data,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
        )
        return cls(cfg.host, context)

    def request(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None) -> _Answer:
        """One request, whole answer read. On a kept-alive connection that the server closed (while idle,
        the usual cause) the request is sent once more on a new one: every request `Kube` makes is safe to
        repeat (reads, merge patches, writes with preconditions, creates answered 409 the second time).
        A connection that failed is never used again."""
        parts = urlsplit(url)
        path = f"{parts.path}?{parts.query}" if parts.query else parts.path
        reused = getattr(self._local, "conn", None) is not None
        try:
            return self._send(method, path, headers, body)
        except _STALE:
            if not reused:
                raise
        return self._send(method, path, headers, body)

    def _send(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> _Answer:
        """One attempt; a connection that failed is closed and forgotten."""
        try:
            return self._exchange(method, path, headers, body)
        except BaseException:
            self._drop()
            raise

    def _exchange(self, method: str, path: str, headers: Mapping[str, str], body: bytes | None) -> _Answer:
        conn = self._conn()
        conn.request(method, path, body=body, headers=dict(headers))
        response = conn.getresponse()
        data = response.read()
        if response.will_close:
            self._drop()
        return _Answer(response.status, response.reason, data, response.headers)

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None and select.select([conn.sock], [], [], 0)[0]:
            # An idle connection has nothing to read: readable means the server closed it (or sent what
            # no request asked for); either way it cannot carry the next request.
            self._drop()
            conn = None
        if conn is None:
            if self._https:
                conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=REQUEST_TIMEOUT, context=self._context
                )
            else:
                conn = http.client.HTTPConnection(self._host, self._port, timeout=REQUEST_TIMEOUT)
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()


class _Answer:
    """An answer read whole: what ApiException.from_response reads of a urllib3 response."""

    def __init__(self, status: int, reason: str, data: bytes, headers: Any) -> None:
        self.status, self.reason, self.data, self.headers = status, reason, data, headers


class Kube:
    """The REST client: generic reads (`get`, paged `list`, `watch`) and writes (`create`, `replace`,
    `patch`, `delete`), and the GPU plugin's own few calls (claims, slices). No driver's API is in it: the
    ComputeDomain driver's calls are its own client's (drivers/computedomain/client.py), over these.
    `annotate` is for `fakeplugin fault`, run by a user, never by the plugin.

    Failures raise the client's `ApiException` (status, reason, body), as the generated API classes do.
    """

    def __init__(self, api_client: ApiClient) -> None:
        self._api = api_client
        self._direct = _Direct.for_client(api_client)

    def server_version(self) -> tuple[int, int]:
        """The API server's (major, minor) from /version; a minor such as "35+" counts as 35."""
        info = self._json("GET", "/version")
        return int(info["major"]), int(re.match(r"\d+", info["minor"]).group())  # type: ignore[union-attr]

    def get(self, path: str) -> Obj:
        """The object at `path`."""
        return self._json("GET", path)

    def list(
        self,
        path: str,
        *,
        field_selector: str = "",
        label_selector: str = "",
        metadata_only: bool = False,
        each: Callable[[Obj], Obj] | None = None,
        limit: int = 500,
    ) -> tuple[list[Obj], str]:
        """Every object at `path` (a collection), and the list's resourceVersion to watch from. Paged
        (`limit` a page), so a 4000-pod list never makes the API server build one huge answer.
        `metadata_only`: each object's metadata alone (PartialObjectMetadata); `each`: what to keep of
        each object, made while its page is the only one decoded."""
        items: list[Obj] = []
        query = [("limit", str(limit)), *_selectors(field_selector, label_selector)]
        accept = METADATA_ONLY if metadata_only else "application/json"
        token = ""
        while True:
            page = self._json(
                "GET", path, query=query + ([("continue", token)] if token else []), accept=accept
            )
            found = page.get("items") or []
            items.extend(found if each is None else map(each, found))
            token = page["metadata"].get("continue") or ""
            if not token:
                return items, page["metadata"]["resourceVersion"]

    def resource_version(self, path: str, *, field_selector: str = "") -> str:
        """The resourceVersion a list of `path` would have now (to watch from), without the list: a page
        of one object is a consistent read of the same snapshot."""
        page = self._json("GET", path, query=[("limit", "1"), *_selectors(field_selector, "")])
        return str(page["metadata"]["resourceVersion"])

    def count(self, path: str, *, field_selector: str = "") -> int:
        """How many objects `path` holds. Without a selector: one item and the server's
        remainingItemCount; with one (the server then gives no count): their metadata only, paged."""
        if not field_selector:
            page = self._json("GET", path, query=[("limit", "1")])
            return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)
        total, token = 0, ""
        while True:
            query = [("limit", "1000"), ("fieldSelector", field_selector)] + (
                [("continue", token)] if token else []
            )
            page = self._json("GET", path, query=query, accept=METADATA_ONLY)
            total += len(page.get("items") or [])
            token = page["metadata"].get("continue") or ""
            if not token:
                return total

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_seconds: int,
        field_selector: str = "",
        label_selector: str = "",
        keep: Callable[[str], bool] | None = None,
    ) -> Iterator[Obj]:
        """Watch events (type, object) at `path` until the server ends the watch; ERROR raises. `keep`: an
        event whose line (the server's JSON, undecoded) it refuses is skipped without being decoded."""
        query = [("allowWatchBookmarks", "true"), *_selectors(field_selector, label_selector)]
        yield from self._watch(path, query, resource_version, timeout_seconds, keep)

    def create(self, path: str, body: Obj) -> Obj:
        """POST `body` to the collection at `path`; the object as created."""
        return self._json("POST", path, body=body)

    def replace(self, path: str, body: Obj) -> Obj:
        """PUT `body` (with its metadata.resourceVersion: a conflict raises 409) at the object's `path`."""
        return self._json("PUT", path, body=body)

    def patch(self, path: str, body: Obj) -> Obj:
        """Merge-patch (RFC 7386) the object at `path` (a `/status` suffix: its status subresource); a
        metadata.resourceVersion in `body` is a precondition (409 when the object changed)."""
        return self._json("PATCH", path, body=body, content_type="application/merge-patch+json")

    def delete(self, path: str) -> None:
        """Delete the object at `path`; already gone (404) is fine."""
        try:
            self._json("DELETE", path)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def annotate(self, path: str, annotations: dict[str, str | None]) -> dict[str, Any]:
        """Merge-patch an object's annotations (`path`: its API path); None removes one."""
        return self._json(
            "PATCH",
            path,
            body={"metadata": {"annotations": annotations}},
            content_type="application/merge-patch+json",
        )

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            "GET",
            f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{_segment(namespace)}"
            f"/resourceclaims/{_segment(name)}",
        )

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("POST", SLICES, body=body)

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._json("PUT", f"{SLICES}/{_segment(body['metadata']['name'])}", body=body)

    def delete_slice(self, existing: dict[str, Any]) -> None:
        meta = existing["metadata"]
        # Preconditions: never delete a slice someone replaced since we read it.
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
        }
        try:
            self._json("DELETE", f"{SLICES}/{_segment(meta['name'])}", body=options)
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    # -- the REST level ---------------------------------------------------------------------------------

    def _watch(
        self,
        path: str,
        query: list[tuple[str, str]],
        resource_version: str,
        timeout_seconds: int,
        keep: Callable[[str], bool] | None = None,
    ) -> Iterator[dict[str, Any]]:
        query = [
            *query,
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
            ("watch", "true"),
        ]
        response = self._request("GET", path, query=query, timeout=timeout_seconds + REQUEST_TIMEOUT)
        try:
            for line in iter_resp_lines(response):
                if keep is not None and not keep(line):
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise ApiException(
                        status=status.get("code"), reason=f"{status.get('reason')}: {status.get('message')}"
                    )
                yield event
        finally:
            # Closed before it goes back to the pool: the server may still be sending on it.
            response.close()
            response.release_conn()

    def _json(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        """One request with a JSON answer, decoded."""
        if self._direct is None:
            response = self._request(
                method, path, query=query, body=body, content_type=content_type, accept=accept
            )
            return json.loads(response.data)
        method, url, headers, _, _ = self._api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params={"Accept": accept},
            auth_settings=AUTH_SETTINGS,
        )
        if body is not None:
            headers["Content-Type"] = content_type
        answer = self._direct.request(method, url, headers, None if body is None else encode(body))
        if not 200 <= answer.status <= 299:
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return json.loads(answer.data)

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: dict[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> urllib3.BaseHTTPResponse:
        """Send a request (auth, default headers and TLS as the client is configured); a non-2xx answer
        raises ApiException. The response is unread: `.data` reads it whole, `.stream()` in chunks."""
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self._api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=AUTH_SETTINGS,
        )
        response = self._api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response


def encode(body: Obj) -> bytes:
    """A request body as Go's encoding/json writes one (kubectl, controllers): compact, non-ASCII as UTF-8.
    The API server keeps a RawExtension (opaque device parameters) as the bytes it was sent and compares
    those bytes where the field may not change (kubernetes v1.37.2 pkg/apis/resource/v1/
    zz_generated.validations.go: ResourceClaimStatus.Allocation NoModify), while it answers reads with them
    compacted: a claim read and written back (runtime.claimstatus.put_devices) keeps its parameters only
    when they were stored compact, as every Go client and our own writes store them. Keys keep the order
    they were read in (Go's writers sort them)."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _selectors(field_selector: str, label_selector: str) -> list[tuple[str, str]]:
    return [
        (key, value)
        for key, value in (("fieldSelector", field_selector), ("labelSelector", label_selector))
        if value
    ]


def _segment(value: str) -> str:
    """A path segment, percent-encoded (names are validated elsewhere; this keeps a bad one harmless)."""
    return quote(value, safe="")


def describe_api_error(exc: Exception) -> str:
    """One readable line for an API failure (status + reason, or the connection problem)."""
    if isinstance(exc, ApiException):
        reason = exc.reason or ""
        with contextlib.suppress(ValueError):  # not a Status object: keep the HTTP reason
            reason = json.loads(exc.body or "{}").get("message", reason)
        return f"{exc.status} {reason}".strip()
    return f"{type(exc).__name__}: {exc}"
