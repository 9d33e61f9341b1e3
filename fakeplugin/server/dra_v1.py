"""k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin over the version-neutral core."""

from __future__ import annotations

from fakeplugin._proto.dra.v1 import api_pb2, api_pb2_grpc
from fakeplugin.model import PreparedDevice
from fakeplugin.server.wireflow import DRAPluginAdapter


class DRAPluginV1(DRAPluginAdapter, api_pb2_grpc.DRAPluginServicer):
    pb = api_pb2

    def device(self, d: PreparedDevice) -> api_pb2.Device:
        # share_id is proto3 optional: None leaves it absent on the wire.
        return api_pb2.Device(
            request_names=d.request_names,
            pool_name=d.pool_name,
            device_name=d.device_name,
            cdi_device_ids=d.cdi_device_ids,
            share_id=d.share_id,
        )
