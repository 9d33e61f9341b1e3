"""grpc.health.v1.Health on TCP, for the pod's liveness and startup probes.

SERVING only when both sockets answer over the real unix sockets, like the kubelet would reach them:
registration GetInfo and an empty NodePrepareResources (which never reaches the core).
"""

from __future__ import annotations

import logging

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fakeplugin._proto.dra.v1 import api_pb2 as dra_pb2
from fakeplugin._proto.dra.v1 import api_pb2_grpc as dra_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as registration_pb2
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from fakeplugin.server.sockets import SocketPaths

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 1.0
# "" is the whole server; "liveness" is the name NVIDIA's driver answers to.
KNOWN_SERVICES = ("", "liveness")


def sockets_answer(paths: SocketPaths) -> bool:
    try:
        with grpc.insecure_channel(f"unix:{paths.registration}") as channel:
            registration_grpc.RegistrationStub(channel).GetInfo(
                registration_pb2.InfoRequest(), timeout=PROBE_TIMEOUT_S
            )
        with grpc.insecure_channel(f"unix:{paths.dra}") as channel:
            dra_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_pb2.NodePrepareResourcesRequest(), timeout=PROBE_TIMEOUT_S
            )
    except grpc.RpcError as exc:
        log.warning("liveness: plugin sockets do not answer: %s %s", exc.code().name, exc.details())
        return False
    return True


class LivenessServicer(health_pb2_grpc.HealthServicer):
    def __init__(self, paths: SocketPaths) -> None:
        self._paths = paths

    def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service not in KNOWN_SERVICES:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        serving = sockets_answer(self._paths)
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)
