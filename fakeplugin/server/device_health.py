"""v1alpha1.DRAResourceHealth: every device of the pool reported HEALTHY, the complete list each time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Collection, Iterable

import grpc

from fakeplugin._proto.dra_health.v1alpha1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

# How long the kubelet keeps a reported status before it turns Unknown (the kubelet's own default).
HEALTH_CHECK_TIMEOUT_S = 30


def all_healthy(pool: str, devices: Iterable[str], now: int) -> api_pb2.NodeWatchResourcesResponse:
    return api_pb2.NodeWatchResourcesResponse(
        devices=[
            api_pb2.DeviceHealth(
                device=api_pb2.DeviceIdentifier(pool_name=pool, device_name=name),
                health=api_pb2.HEALTHY,
                last_updated_time=now,
                health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_S,
            )
            for name in devices
        ]
    )


class DeviceHealthServicer(api_pb2_grpc.DRAResourceHealthServicer):
    def __init__(self, pool: str, devices: Collection[str], interval_s: float) -> None:
        self._pool = pool
        self._devices = devices  # may be live: every report lists the devices as they are then
        self._interval_s = interval_s
        self._closed = asyncio.Event()

    def close(self) -> None:
        """End every open stream, so a graceful server stop does not wait for the kubelet's endless watch."""
        self._closed.set()

    async def NodeWatchResources(
        self, request: api_pb2.NodeWatchResourcesRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[api_pb2.NodeWatchResourcesResponse]:
        log.debug("health watch opened by %s", context.peer())
        while not self._closed.is_set():
            yield all_healthy(self._pool, list(self._devices), int(time.time()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self._interval_s)
