"""The runtime's gRPC edge between the kubelet and a driver's prepare side (runtime.driver.Claims).

Modules: `sockets` (socket path rules), `registration`
(pluginregistration.Registration), `wireflow` (the version-neutral request flow), `dra_v1` / `dra_v1beta1`
(one adapter per wire version), `device_health` (v1alpha1.DRAResourceHealth), `liveness`
(grpc.health.v1.Health over TCP), `trace` (request logging), `calllog` (every kubelet call as a JSON
line, and its reader), `app` (ServerSettings, Server, run).
"""

from __future__ import annotations

from fakeplugin.server.app import Server, ServerSettings, run

__all__ = ["Server", "ServerSettings", "run"]
