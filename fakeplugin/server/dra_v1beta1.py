"""k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin over the version-neutral core.

v1beta1 differs from v1 only in lacking Device.share_id; a share ID from the core is dropped here, as the
kubelet's own v1beta1 wrapper does.
"""

from __future__ import annotations

from fakeplugin._proto.dra.v1beta1 import api_pb2, api_pb2_grpc
from fakeplugin.model import PreparedDevice
from fakeplugin.server.wireflow import DRAPluginAdapter


class DRAPluginV1beta1(DRAPluginAdapter, api_pb2_grpc.DRAPluginServicer):
    pb = api_pb2

    def device(self, d: PreparedDevice) -> api_pb2.Device:
        return api_pb2.Device(
            request_names=d.request_names,
            pool_name=d.pool_name,
            device_name=d.device_name,
            cdi_device_ids=d.cdi_device_ids,
        )
