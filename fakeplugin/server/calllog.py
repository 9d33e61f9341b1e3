"""The call log: one JSON line per gRPC call the plugin answered, in `<plugins-dir>/<driver>/calls.jsonl`.

    {"time": "2026-01-02T03:04:05.678Z", "method": "NodePrepareResources",
     "service": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", "claims": ["default/gpu:6f1c..."],
     "result": "ok", "durationMs": 12.345}

`time` is when the call arrived (UTC), `claims` are the request's `namespace/name:uid` (Prepare and
Unprepare), `result` is "error" when the call failed (`error`: its status and message) or any claim
failed (`error`: {uid: message}); NotifyRegistrationStatus adds `registered`; NodeWatchResources is
written when its stream ends, with `responses` (how many updates it sent).

Written by an interceptor (CallLogInterceptor) around the registration and DRA services: it sees
every request and response, both wire versions alike, without touching the adapters. The liveness
service is not logged (the kubelet's probe would fill the log).

Invariants (readers rely on them): a unary call's record is written before its answer is sent, so a
client that got an answer finds the record; hence logged handlers fail by raising, or by set_code() and
returning (gRPC sends the status once the handler returned); never by `context.abort()`, which in
grpc.aio puts the status on the wire before it raises. Every record is
one whole line written by one write() on an O_APPEND fd, so concurrent readers (and a second plugin writing
during a rolling update) never see lines interleaved; only the last line of a file can be torn, and only
when a writer died mid-write, which the next writer's open() terminates with a newline. The file holds at
most `max_bytes` plus one record before it is renamed to `calls.jsonl.1` (one old generation is kept).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.message import Message

log = logging.getLogger(__name__)

CALL_LOG_NAME = "calls.jsonl"
DEFAULT_MAX_BYTES = 4 * 2**20
CANCELLED = "CANCELLED: the call was cancelled (client gone or server stopping)"


def rotated(path: Path) -> Path:
    """The older generation of the call log at `path`."""
    return path.with_name(path.name + ".1")


class CallLog:
    """Appends records to `path`, rotating it past `max_bytes`; safe across the server's worker threads.

    A write is one syscall into the page cache (no fsync), under a lock only for the size and the rotation.
    A machine crash may lose the newest records; a plugin crash loses nothing already written.
    """

    def __init__(self, path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"call log {path}: size limit must be positive, got {max_bytes}")
        self.path = path
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._size = 0  # of the file behind _fd, as far as this writer knows
        self._failing = False  # a write failed; logged once until one succeeds again
        self._lock = threading.Lock()  # _fd, _size, _failing

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn line of a writer that died: end it
            size += os.write(fd, b"\n")
        self._fd, self._size = fd, size

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, record: dict[str, Any]) -> None:
        """Write `record` as one line; never raises (a failed write is logged, the call goes on)."""
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:  # a call finishing after close(): the server is stopping
                return
            try:
                self._size += os.write(self._fd, line)
                if self._size > self.max_bytes:
                    self._rotate()
                self._failing = False
            except OSError as exc:
                if not self._failing:
                    log.warning(
                        "call log %s: cannot write (%s); records are lost until it works again",
                        self.path,
                        exc,
                    )
                self._failing = True

    def _rotate(self) -> None:
        assert self._fd is not None
        mine = os.fstat(self._fd)
        try:
            current = os.stat(self.path)
            # Another writer may have rotated already: then `path` is its new file, not ours to move.
            if (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
                os.replace(self.path, rotated(self.path))
        except FileNotFoundError:
            pass
        self.close()
        self.open()


def read_calls(path: Path, *, claim: str | None = None, method: str | None = None) -> list[dict[str, Any]]:
    """The records of the call log at `path`, oldest first (`path.1`, then `path`).

    claim: "namespace/name" or a claim UID; method: a short name such as "NodePrepareResources".
    A last line that does not parse is a record being written, and skipped.
    """
    records = [r for p in (rotated(path), path) for r in _read_file(p)]
    return [
        r
        for r in records
        if (method is None or r.get("method") == method)
        and (claim is None or any(claim in c.rsplit(":", 1) for c in r.get("claims", [])))
    ]


def _read_file(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return []
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if number < len(lines):  # not the last line: the torn line of a writer that died
                log.warning("%s:%d: skipping a line that is not a JSON record", path, number)
    return records


class CallLogInterceptor(grpc.ServerInterceptor):
    """Appends one record per unary call, and per server stream when it ends, to a CallLog. A handler runs
    in its worker thread until it returns; the record is written there, before gRPC sends the answer."""

    def __init__(self, calls: CallLog) -> None:
        self._calls = calls

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return handler
        _, service, method = handler_call_details.method.split("/")
        if handler.unary_unary is not None:
            unary = handler.unary_unary

            def logged_unary(request: Message, context: grpc.ServicerContext) -> Any:
                record, started = _begin(service, method, request)
                try:
                    response = unary(request, context)
                except BaseException as exc:
                    self._calls.append(_failed(record, started, exc, context))
                    raise
                self._calls.append(_done(record, started, context, response))
                return response

            return grpc.unary_unary_rpc_method_handler(
                logged_unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream = handler.unary_stream

            def logged_stream(request: Message, context: grpc.ServicerContext) -> Iterator[Any]:
                record, started = _begin(service, method, request)
                record["responses"] = 0
                try:
                    for response in stream(request, context):
                        record["responses"] += 1
                        yield response
                except BaseException as exc:  # GeneratorExit: gRPC dropped the stream (client gone)
                    self._calls.append(_failed(record, started, exc, context))
                    raise
                self._calls.append(_done(record, started, context, None))

            return grpc.unary_stream_rpc_method_handler(
                logged_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler  # no streaming requests among the kubelet's calls


def _begin(service: str, method: str, request: Any) -> tuple[dict[str, Any], float]:
    now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    record: dict[str, Any] = {"time": now, "method": method, "service": service}
    fields = request.DESCRIPTOR.fields_by_name
    if "claims" in fields:
        record["claims"] = [f"{c.namespace}/{c.name}:{c.uid}" for c in request.claims]
    if "plugin_registered" in fields:
        record["registered"] = request.plugin_registered
    return record, time.perf_counter()


def _done(
    record: dict[str, Any], started: float, context: grpc.ServicerContext, response: Message | None
) -> dict[str, Any]:
    code = context.code()
    if code is not None and code != grpc.StatusCode.OK:  # set without raising
        return _finish(record, started, f"{code.name}: {_details(context)}")
    if not context.is_active():  # the client went away: gRPC drops the answer
        return _finish(record, started, CANCELLED)
    claims = getattr(response, "claims", {}) if response is not None else {}
    errors = {uid: answer.error for uid, answer in claims.items() if getattr(answer, "error", "")}
    return _finish(record, started, errors or None)


def _failed(
    record: dict[str, Any], started: float, exc: BaseException, context: grpc.ServicerContext
) -> dict[str, Any]:
    code = context.code()
    if isinstance(exc, GeneratorExit) or not context.is_active():
        error = CANCELLED
    elif code is not None and code != grpc.StatusCode.OK:  # set_code() or abort() before it raised
        error = f"{code.name}: {_details(context)}"
    else:
        error = f"UNKNOWN: {type(exc).__name__}: {exc}"
    return _finish(record, started, error)


def _finish(record: dict[str, Any], started: float, error: str | dict[str, str] | None) -> dict[str, Any]:
    record["result"] = "error" if error else "ok"
    if error:
        record["error"] = error
    record["durationMs"] = round((time.perf_counter() - started) * 1000, 3)
    return record


def _details(context: grpc.ServicerContext) -> str:
    """The status details set on `context` (the sync server keeps them as bytes)."""
    details: bytes | str | None = context.details()
    return details.decode(errors="replace") if isinstance(details, bytes) else details or ""
