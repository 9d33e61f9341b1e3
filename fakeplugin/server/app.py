"""The whole plugin server: DRA services and registration on unix sockets, liveness on TCP.

Synchronous gRPC servers (`grpc.server`), each with its own thread pool: a call runs in a worker thread
from its start to its answer, the core included (it blocks on API calls and the node lock). No event loop
sits between the gRPC core and the handlers (it held 59 % of the GIL under 16 concurrent callers, issue
21 in docs/benchmarks.md). It never touches the Kubernetes API; all it knows of the world is the prepare
side it is given (runtime.driver.Claims).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2_grpc

from fakeplugin._proto.dra.v1 import api_pb2_grpc as dra_v1_grpc
from fakeplugin._proto.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_grpc
from fakeplugin._proto.dra_health.v1alpha1 import api_pb2_grpc as device_health_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from fakeplugin.logs import GRPC_TRACE_LEVEL
from fakeplugin.runtime.driver import Claims
from fakeplugin.server.calllog import CALL_LOG_NAME, DEFAULT_MAX_BYTES, CallLog, CallLogInterceptor
from fakeplugin.server.device_health import DeviceHealthServicer, StateOf, unserved_handler
from fakeplugin.server.device_health import v1_handler as v1_health_handler
from fakeplugin.server.dra_v1 import DRAPluginV1
from fakeplugin.server.dra_v1beta1 import DRAPluginV1beta1
from fakeplugin.server.liveness import LivenessServicer
from fakeplugin.server.registration import RegistrationServicer
from fakeplugin.server.sockets import check_length, prepare_listen_path, remove_socket, socket_paths
from fakeplugin.server.trace import TraceInterceptor

log = logging.getLogger(__name__)

KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
# How long a stop waits for RPCs in flight before cancelling them.
STOP_GRACE_S = 5.0
# DRA workers beyond `threads`: the kubelet's health watch holds one for as long as it runs, the liveness
# probe's empty Prepare needs one even while every Prepare thread is busy.
DRA_EXTRA_THREADS = 4
# Registration (GetInfo, NotifyRegistrationStatus) and liveness answer from memory.
SMALL_POOL = 2


@dataclass(frozen=True)
class ServerSettings:
    driver_name: str
    registrar_dir: Path = KUBELET_REGISTRY_DIR
    plugins_dir: Path = KUBELET_PLUGINS_DIR
    pod_uid: str = ""  # set: socket names carry it, so two plugin pods can overlap in a rolling update
    health_address: str = "127.0.0.1"
    health_port: int = -1  # < 0: no liveness service; 0: any free port (see Server.health_port)
    # Serve v1alpha1.DRAResourceHealth and v1 on the DRA socket (fakeplugin.faults.devicehealth says
    # when); off: the kubelet's call gets Unimplemented as from NVIDIA's releases.
    device_health: bool = False
    device_health_pool: str = ""
    device_health_devices: Collection[str] = ()  # may be live (the node inventory): read for every report
    device_health_interval_s: float = 10.0
    device_health_of: StateOf | None = None  # device name → (its kind, its injected fault or None)
    verbosity: int = 0  # >= fakeplugin.logs.GRPC_TRACE_LEVEL logs every request and response
    call_log_max_bytes: int = DEFAULT_MAX_BYTES  # calls.jsonl is rotated to calls.jsonl.1 past this
    # Threads running Prepare/Unprepare calls at once (their claim GETs overlap; the rest is batched under
    # the node lock). The kubelet calls once per pod being started, so a burst of pods is a burst of calls.
    threads: int = 8

    def __post_init__(self) -> None:
        if self.device_health and not self.device_health_pool:
            raise ValueError("device health: a pool name is required")
        if self.device_health and self.device_health_of is None:
            raise ValueError("device health: the devices' kinds and faults are required")
        if self.device_health and self.device_health_interval_s <= 0:
            raise ValueError(f"device health: interval must be positive, got {self.device_health_interval_s}")


class Server:
    """Start with `start()`, end with `stop()`; `run()` does both around a stop event."""

    def __init__(self, driver: Claims, cfg: ServerSettings) -> None:
        self.cfg = cfg
        self.paths = socket_paths(cfg.driver_name, cfg.registrar_dir, cfg.plugins_dir, cfg.pod_uid)
        self.registration = RegistrationServicer(cfg.driver_name, self.paths.dra, cfg.device_health)
        # Beside the checkpoint, in <plugins-dir>/<driver>/; see fakeplugin.server.calllog.
        self.call_log = CallLog(self.paths.dra.parent / CALL_LOG_NAME, cfg.call_log_max_bytes)
        self.health_port: int | None = None  # the bound liveness port once started, None when disabled
        self._driver = driver
        self._device_health = (
            DeviceHealthServicer(
                cfg.device_health_pool,
                cfg.device_health_devices,
                cfg.device_health_interval_s,
                cfg.device_health_of,
            )
            if cfg.device_health and cfg.device_health_of
            else None
        )
        self._servers: list[grpc.Server] = []  # in start order

    @property
    def registered(self) -> bool:
        """Whether the kubelet has confirmed the registration."""
        return self.registration.registered

    def start(self) -> None:
        # Refuse unusable paths before anything listens.
        check_length(self.paths.dra)
        check_length(self.paths.registration)
        try:
            self.call_log.open()
            # The DRA services first: once the registration socket appears the kubelet may call them.
            self._serve_unix(self._dra_server(), self.paths.dra)
            registration = self._new_server("registration", SMALL_POOL)
            registration_grpc.add_RegistrationServicer_to_server(self.registration, registration)
            self._serve_unix(registration, self.paths.registration)
            if self.cfg.health_port >= 0:
                self._serve_liveness()
        except BaseException:
            self.stop()
            raise
        log.info(
            "serving %s: DRA on %s, registration on %s, liveness %s",
            self.cfg.driver_name,
            self.paths.dra,
            self.paths.registration,
            f"on {self.cfg.health_address}:{self.health_port}"
            if self.health_port is not None
            else "disabled",
        )

    def stop(self) -> None:
        """Stop serving (the reverse of start order) and remove both sockets. Safe to call more than once."""
        if self._device_health is not None:
            self._device_health.close()
        while self._servers:
            self._servers.pop().stop(STOP_GRACE_S).wait()
        remove_socket(self.paths.registration)
        remove_socket(self.paths.dra)
        self.call_log.close()  # after the servers: calls still finishing in the grace period are logged

    def _new_server(self, name: str, threads: int) -> grpc.Server:
        """A server for kubelet-facing services: every call logged, traced too at high verbosity."""
        trace = self.cfg.verbosity >= GRPC_TRACE_LEVEL
        interceptors: list[grpc.ServerInterceptor] = [CallLogInterceptor(self.call_log)]
        if trace:
            interceptors.append(TraceInterceptor())
        return grpc.server(_pool(name, threads), interceptors=interceptors)

    def _dra_server(self) -> grpc.Server:
        server = self._new_server("dra", self.cfg.threads + DRA_EXTRA_THREADS)
        dra_v1_grpc.add_DRAPluginServicer_to_server(DRAPluginV1(self._driver, self.cfg.driver_name), server)
        dra_v1beta1_grpc.add_DRAPluginServicer_to_server(
            DRAPluginV1beta1(self._driver, self.cfg.driver_name), server
        )
        if self._device_health is not None:
            device_health_grpc.add_DRAResourceHealthServicer_to_server(self._device_health, server)
            server.add_generic_rpc_handlers((v1_health_handler(self._device_health),))
        else:
            server.add_generic_rpc_handlers((unserved_handler(),))
        return server

    def _serve_unix(self, server: grpc.Server, path: Path) -> None:
        prepare_listen_path(path)
        try:
            # "unix:" + absolute path: gRPC's "unix://" form allows two bytes less of the path.
            server.add_insecure_port(f"unix:{path}")
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {path}: {exc}") from exc
        self._servers.append(server)
        server.start()

    def _serve_liveness(self) -> None:
        address, port = self.cfg.health_address, self.cfg.health_port
        host = f"[{address}]" if ":" in address else address
        server = grpc.server(_pool("liveness", SMALL_POOL))
        health_pb2_grpc.add_HealthServicer_to_server(LivenessServicer(self.paths), server)
        try:
            self.health_port = server.add_insecure_port(f"{host}:{port}")
        except RuntimeError as exc:
            raise OSError(f"cannot listen on {host}:{port} for liveness: {exc}") from exc
        self._servers.append(server)
        server.start()


def _pool(name: str, threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)


def run(driver: Claims, cfg: ServerSettings, stop: threading.Event | None = None) -> None:
    """Serve until `stop` is set or SIGTERM/SIGINT arrives, then stop gracefully and remove the sockets."""
    if stop is None:
        stop = threading.Event()
    server = Server(driver, cfg)
    with _stopped_by_signals(stop):
        try:
            server.start()
            while not stop.wait(1.0):  # a timed wait: the main thread runs signal handlers between waits
                pass
            log.info("stopping %s (kubelet registration confirmed: %s)", cfg.driver_name, server.registered)
        finally:
            server.stop()


@contextmanager
def _stopped_by_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set `stop` while the block runs. Signal handlers can only be installed from the
    main thread; elsewhere `stop` is the only way out."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = [signal.signal(sig, lambda *_: stop.set()) for sig in signals]
    try:
        yield
    finally:
        for sig, handler in zip(signals, previous, strict=True):
            signal.signal(sig, handler)
