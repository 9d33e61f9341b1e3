"""k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin over the version-neutral core."""

from __future__ import annotations

import grpc

from fakeplugin._proto.dra.v1 import api_pb2, api_pb2_grpc
from fakeplugin.model import PreparedDevice, PrepareResult
from fakeplugin.server import claims
from fakeplugin.server.driver import Driver


class DRAPluginV1(api_pb2_grpc.DRAPluginServicer):
    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def NodePrepareResources(
        self, request: api_pb2.NodePrepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> api_pb2.NodePrepareResourcesResponse:
        results = await claims.prepare(self._driver, request.claims)
        return api_pb2.NodePrepareResourcesResponse(
            claims={uid: prepare_response(result) for uid, result in results.items()}
        )

    async def NodeUnprepareResources(
        self, request: api_pb2.NodeUnprepareResourcesRequest, context: grpc.aio.ServicerContext
    ) -> api_pb2.NodeUnprepareResourcesResponse:
        errors = await claims.unprepare(self._driver, request.claims)
        return api_pb2.NodeUnprepareResourcesResponse(
            claims={uid: api_pb2.NodeUnprepareResourceResponse(error=error) for uid, error in errors.items()}
        )


def prepare_response(result: PrepareResult) -> api_pb2.NodePrepareResourceResponse:
    if result.error:
        return api_pb2.NodePrepareResourceResponse(error=result.error)
    return api_pb2.NodePrepareResourceResponse(devices=[device(d) for d in result.devices])


def device(d: PreparedDevice) -> api_pb2.Device:
    # share_id is proto3 optional: None leaves it absent on the wire.
    return api_pb2.Device(
        request_names=d.request_names,
        pool_name=d.pool_name,
        device_name=d.device_name,
        cdi_device_ids=d.cdi_device_ids,
        share_id=d.share_id,
    )
