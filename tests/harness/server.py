"""The gRPC server in its worker threads, a stand-in core behind it, and the kubelet's side.

`Running` serves a `CannedDriver` (canned results, recorded calls, a gate to hold prepare) as the plugin
process does; the test thread calls it through the generated stubs, as the kubelet does. The `serve`
fixture of tests/conftest.py starts one per test.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2_grpc

from fakeplugin._proto.dra.v1 import api_pb2 as v1
from fakeplugin._proto.dra.v1 import api_pb2_grpc as v1_grpc
from fakeplugin._proto.dra.v1beta1 import api_pb2 as v1beta1
from fakeplugin._proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from fakeplugin.model import ClaimRef, PreparedDevice, PrepareResult
from fakeplugin.server import Server, ServerSettings

RPC_TIMEOUT_S = 10
WIRE = {"v1": (v1, v1_grpc), "v1beta1": (v1beta1, v1beta1_grpc)}

GPU0 = PreparedDevice(
    pool_name="node1",
    device_name="gpu-0",
    request_names=("gpu",),
    cdi_device_ids=("k8s.gpu.nvidia.com/claim=uid-a-gpu-0",),
)
GPU1_SHARED = PreparedDevice(
    pool_name="node1",
    device_name="gpu-1",
    request_names=(),
    cdi_device_ids=("k8s.gpu.nvidia.com/claim=uid-a-gpu-1", "k8s.gpu.nvidia.com/device=gpu-1"),
    share_id="6f1c0a3e-share",
)


class CannedDriver:
    """A stand-in core: returns what it was given, records what it was asked, can be held in prepare."""

    def __init__(
        self,
        prepared: dict[str, PrepareResult] | Exception | None = None,
        unprepared: dict[str, str] | None = None,
        gate: threading.Event | None = None,
    ) -> None:
        self.prepared = prepared if prepared is not None else {}
        self.unprepared = unprepared if unprepared is not None else {}
        self.gate = gate
        self.entered = threading.Event()
        self.calls: list[tuple[str, list[ClaimRef]]] = []

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        self.calls.append(("prepare", list(claims)))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(timeout=60)
        if isinstance(self.prepared, Exception):
            raise self.prepared
        return dict(self.prepared)

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        self.calls.append(("unprepare", list(claims)))
        return dict(self.unprepared)


class Running:
    """The server serving in its worker threads, as in the plugin process; the test thread is the kubelet."""

    def __init__(self, driver: CannedDriver, cfg: ServerSettings) -> None:
        self.server = Server(driver, cfg)
        self.channels: list[grpc.Channel] = []

    def channel(self, path: Path) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix:{path}")
        self.channels.append(channel)
        return channel

    def registration(self) -> reg_grpc.RegistrationStub:
        return reg_grpc.RegistrationStub(self.channel(self.server.paths.registration))

    def dra(self, version: str) -> Any:
        return WIRE[version][1].DRAPluginStub(self.channel(self.server.paths.dra))

    def health(self) -> health_pb2_grpc.HealthStub:
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.health_port}")
        self.channels.append(channel)
        return health_pb2_grpc.HealthStub(channel)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
        self.server.stop()


def claim(api: Any, uid: str, namespace: str = "default", name: str | None = None) -> Any:
    """A Claim message of the wire API `api` (v1 or v1beta1), named claim-<uid> unless named."""
    return api.Claim(namespace=namespace, uid=uid, name=f"claim-{uid}" if name is None else name)
