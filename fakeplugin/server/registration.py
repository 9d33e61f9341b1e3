"""pluginregistration.Registration: how the kubelet learns the driver name and the DRA socket."""

from __future__ import annotations

import logging
from pathlib import Path

import grpc

from fakeplugin._proto.pluginregistration.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# The kubelet uses the first entry it knows, so v1 comes first; it skips entries it does not know.
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
# Kubelets 1.37+ take the first health service of theirs that the plugin lists (v1, then v1alpha1,
# `pickHealthService` in kubernetes/kubernetes pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go v1.37.2);
# 1.34 to 1.36 know v1alpha1 only and call it whenever the driver registered.
DEVICE_HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")


def supported_versions(device_health: bool) -> list[str]:
    return [*DRA_SERVICES, *(DEVICE_HEALTH_SERVICES if device_health else ())]


class RegistrationServicer(api_pb2_grpc.RegistrationServicer):
    """Answers from fixed data only, so GetInfo never waits for anything."""

    def __init__(self, driver_name: str, endpoint: Path, device_health: bool) -> None:
        self._info = api_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=driver_name,
            endpoint=str(endpoint),
            supported_versions=supported_versions(device_health),
        )
        # True once the kubelet confirmed the registration, until it reports a failure.
        self.registered = False

    def GetInfo(self, request: api_pb2.InfoRequest, context: grpc.ServicerContext) -> api_pb2.PluginInfo:
        return self._info

    def NotifyRegistrationStatus(
        self, request: api_pb2.RegistrationStatus, context: grpc.ServicerContext
    ) -> api_pb2.RegistrationStatusResponse:
        self.registered = request.plugin_registered
        if not request.plugin_registered:
            log.error("kubelet rejected the registration of %s: %s", self._info.name, request.error)
            # Not context.abort() (see fakeplugin.server.calllog): a status set here is sent once we
            # returned, after the call log has its record.
            context.set_code(grpc.StatusCode.UNKNOWN)
            context.set_details(f"failed registration process: {request.error}")
            return api_pb2.RegistrationStatusResponse()
        log.info("kubelet registered %s (endpoint %s)", self._info.name, self._info.endpoint)
        return api_pb2.RegistrationStatusResponse()
