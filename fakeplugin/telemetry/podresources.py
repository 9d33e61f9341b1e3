"""The kubelet's PodResources v1 `List` (serve on a kubelet node): which container has which DRA device.

As NVIDIA/dcgm-exporter 4.5.3-4.8.2 `internal/pkg/transformation/kubernetes.go` reads it (`getMappings`,
`connectToServer`, `listPods`): the socket `/var/lib/kubelet/pod-resources/kubelet.sock` by default
(`pkg/cmd/app.go` --pod-resources-kubelet-socket); no socket: no attribution (not an error); one `List` per
scrape with a 10 s deadline (`connectionTimeout`); a failed call logs and leaves the series unattributed.
The kubelet fills `dynamic_resources` with the feature gate KubeletPodResourcesDynamicResources: beta and on
by default since Kubernetes 1.34, GA (locked on) since 1.36 (kubernetes/kubernetes v1.37.2
pkg/features/kube_features.go), so every minor fakeplugin runs (1.34 to 1.38) has it without a flag.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import grpc

from fakeplugin._proto.podresources.v1 import api_pb2, api_pb2_grpc
from fakeplugin.telemetry.attribution import Use

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
TIMEOUT_SECONDS = 10.0  # transformation/kubernetes.go connectionTimeout
MAX_MESSAGE_BYTES = 16 << 20  # our bound on one answer (thousands of containers fit)


def uses_of(response: api_pb2.ListPodResourcesResponse) -> list[Use]:
    """Every container's claim devices, in the kubelet's order (pure)."""
    return [
        Use(
            pod=pod.name,
            namespace=pod.namespace,
            container=container.name,
            claim_name=dynamic.claim_name,
            claim_namespace=dynamic.claim_namespace,
            driver=resource.driver_name,
            pool=resource.pool_name,
            device=resource.device_name,
        )
        for pod in response.pod_resources
        for container in pod.containers
        for dynamic in container.dynamic_resources
        for resource in dynamic.claim_resources
    ]


class PodResources:
    """A `List` client over the kubelet's socket; one channel, kept (gRPC reconnects it)."""

    def __init__(self, socket: Path = DEFAULT_SOCKET) -> None:
        self.socket = socket
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._reported = ""  # the last problem logged: one line per change, not one per scrape

    def uses(self) -> list[Use]:
        """The node's DRA uses now; none when the socket is missing or the call fails (logged)."""
        if not self.socket.exists():
            self._report(f"no kubelet PodResources socket at {self.socket}: series carry no pod labels")
            return []
        try:
            response = self._stub().List(api_pb2.ListPodResourcesRequest(), timeout=TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            self._report(f"PodResources List on {self.socket}: {exc.code().name}: {exc.details()}")
            return []
        self._report("")
        return uses_of(response)

    def _stub(self) -> api_pb2_grpc.PodResourcesListerStub:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket.absolute()}",
                    options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)],
                )
            return api_pb2_grpc.PodResourcesListerStub(self._channel)

    def _report(self, problem: str) -> None:
        if problem != self._reported:
            self._reported = problem
            if problem:
                log.warning("%s", problem)
            else:
                log.info("kubelet PodResources on %s answers", self.socket)

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
