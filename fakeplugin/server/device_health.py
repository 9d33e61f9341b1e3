"""v1alpha1.DRAResourceHealth and v1.DRAResourceHealth (kubelet 1.37+): every device of the pool, the
complete list each time; HEALTHY unless an injected fault (a Node's fakeplugin.dev/device-faults,
fakeplugin.publish.devicefaults) says otherwise."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator

import grpc

from fakeplugin._proto.dra_health.v1alpha1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

# How long the kubelet keeps a reported status before it turns Unknown (the kubelet's own default).
HEALTH_CHECK_TIMEOUT_S = 30

# Device name → (healthy, message) when a fault was injected, else None (healthy, no message).
HealthOf = Callable[[str], "tuple[bool, str] | None"]


def v1_handler(servicer: api_pb2_grpc.DRAResourceHealthServicer) -> grpc.GenericRpcHandler:
    """The same servicer as v1.DRAResourceHealth: its api.proto differs from v1alpha1's only in the
    package line (kubernetes/kubelet pkg/apis/dra-health/{v1,v1alpha1}/api.proto, v0.37.2), so the
    messages are byte-identical on the wire and v1alpha1's classes encode them."""
    return grpc.method_handlers_generic_handler(
        "v1.DRAResourceHealth",
        {
            "NodeWatchResources": grpc.unary_stream_rpc_method_handler(
                servicer.NodeWatchResources,
                request_deserializer=api_pb2.NodeWatchResourcesRequest.FromString,
                response_serializer=api_pb2.NodeWatchResourcesResponse.SerializeToString,
            )
        },
    )


def _no_fault(name: str) -> tuple[bool, str] | None:
    return None


def report(
    pool: str, devices: Iterable[str], now: int, health_of: HealthOf = _no_fault
) -> api_pb2.NodeWatchResourcesResponse:
    response = api_pb2.NodeWatchResourcesResponse()
    for name in devices:
        healthy, message = health_of(name) or (True, "")
        response.devices.append(
            api_pb2.DeviceHealth(
                device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                health=api_pb2.HEALTHY if healthy else api_pb2.UNHEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_S,
                message=message,
            )
        )
    return response


class DeviceHealthServicer(api_pb2_grpc.DRAResourceHealthServicer):
    def __init__(
        self, pool: str, devices: Collection[str], interval_s: float, health_of: HealthOf = _no_fault
    ) -> None:
        self._pool = pool
        self._devices = devices  # may be live: every report lists the devices as they are then
        self._health_of = health_of  # live too: a fault shows in the next report
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._closed = False
        self._streams: set[threading.Event] = set()  # one per open stream: set to end it

    def close(self) -> None:
        """End every open stream, so a graceful server stop does not wait for the kubelet's endless watch."""
        with self._lock:
            self._closed = True
            for ended in self._streams:
                ended.set()

    def NodeWatchResources(
        self, request: api_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[api_pb2.NodeWatchResourcesResponse]:
        log.debug("health watch opened by %s", context.peer())
        # A stream holds its worker thread: it ends when the server closes or the client goes away.
        ended = threading.Event()
        context.add_callback(ended.set)
        with self._lock:
            if self._closed:
                return
            self._streams.add(ended)
        try:
            while not ended.is_set():
                yield report(self._pool, list(self._devices), int(time.time()), self._health_of)
                ended.wait(self._interval_s)
        finally:
            with self._lock:
                self._streams.discard(ended)
