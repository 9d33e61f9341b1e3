"""v1alpha1.DRAResourceHealth and v1.DRAResourceHealth (kubelet 1.37+): every device of the pool, the
complete list each time, its health from fakeplugin.faults.devicehealth (PR #1243's design: no NVIDIA
release serves this service). When it is not served, `unserved_handler` answers the kubelet's call as
NVIDIA's released drivers do."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator

import grpc

from fakeplugin._proto.dra_health.v1alpha1 import api_pb2, api_pb2_grpc
from fakeplugin.faults import devicehealth
from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.server.registration import DEVICE_HEALTH_SERVICES

log = logging.getLogger(__name__)

# How long the kubelet keeps a reported status before it turns Unknown (the kubelet's own default).
HEALTH_CHECK_TIMEOUT_S = 30

# Device name → (its kind: gpu, mig, migdyn or vfio; its injected fault now, None when it has none), or
# None when the device is gone since the names were read.
StateOf = Callable[[str], "tuple[str, DeviceFault | None] | None"]

_WIRE = {
    devicehealth.HEALTHY: api_pb2.HEALTHY,
    devicehealth.UNHEALTHY: api_pb2.UNHEALTHY,
    devicehealth.UNKNOWN: api_pb2.UNKNOWN,
}


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


def unserved_handler() -> grpc.GenericRpcHandler:
    """Both health services as a server without them answers: NVIDIA's drivers do not register them, so
    grpc-go answers Unimplemented "unknown service v1alpha1.DRAResourceHealth" (grpc server.go
    handleStream), which a 1.36 kubelet logs and retries every 5 s (kubernetes/kubernetes issue #141855)."""

    class Unserved(grpc.GenericRpcHandler):
        def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
            service = details.method.lstrip("/").partition("/")[0]
            if service not in DEVICE_HEALTH_SERVICES:
                return None

            def unknown(
                request: api_pb2.NodeWatchResourcesRequest, context: grpc.ServicerContext
            ) -> Iterator[api_pb2.NodeWatchResourcesResponse]:
                context.abort(grpc.StatusCode.UNIMPLEMENTED, f"unknown service {service}")

            return grpc.unary_stream_rpc_method_handler(
                unknown, request_deserializer=api_pb2.NodeWatchResourcesRequest.FromString
            )

    return Unserved()


def report(
    pool: str, health: Iterable[tuple[str, devicehealth.Health]], now: int
) -> api_pb2.NodeWatchResourcesResponse:
    response = api_pb2.NodeWatchResourcesResponse()
    for name, h in health:
        response.devices.append(
            api_pb2.DeviceHealth(
                device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                health=_WIRE[h.status],
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_S,
                message=h.message,
            )
        )
    return response


class DeviceHealthServicer(api_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, pool: str, devices: Collection[str], interval_s: float, state_of: StateOf) -> None:
        self._pool = pool
        self._devices = devices  # may be live: every report lists the devices as they are then
        self._state_of = state_of  # live too: a fault shows in the next report
        self._interval_s = interval_s
        self._lock = threading.Lock()
        # Each device's health since the plugin started (Unhealthy is sticky), shared by all streams;
        # faults are sampled at each report, so one set and cleared between two reports is not seen.
        self._health: dict[str, devicehealth.Health] = {}
        self._closed = False
        self._streams: set[threading.Event] = set()  # one per open stream: set to end it

    def close(self) -> None:
        """End every open stream, so a graceful server stop does not wait for the kubelet's endless watch."""
        with self._lock:
            self._closed = True
            for ended in self._streams:
                ended.set()

    def _current(self) -> list[tuple[str, devicehealth.Health]]:
        """Every device's health now: new devices start at their initial health, gone ones are forgotten
        (PR #1243 buildHealthReport)."""
        names = list(self._devices)
        with self._lock:
            health: dict[str, devicehealth.Health] = {}
            for name in names:
                state = self._state_of(name)
                if state is None:
                    continue
                kind, fault = state
                before = self._health.get(name) or devicehealth.initial(kind)
                health[name] = devicehealth.step(before, kind, fault)
            self._health = health
        return list(health.items())

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
                yield report(self._pool, self._current(), int(time.time()))
                ended.wait(self._interval_s)
        finally:
            with self._lock:
                self._streams.discard(ended)
