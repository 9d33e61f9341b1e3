"""`fakeplugin serve`: run as the kubelet plugin of one node (what the DaemonSet runs)."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fakeplugin.commands import (
    COMPUTE_DOMAINS,
    emulated,
    emulation_flags,
    flag,
    plugin_driver_name,
    shared_flags,
    telemetry_flags,
)
from fakeplugin.runtime.bootid import BOOT_ID_FILE
from fakeplugin.server import metrics
from fakeplugin.server.app import DRA_EXTRA_THREADS, KUBELET_PLUGINS_DIR, KUBELET_REGISTRY_DIR

if TYPE_CHECKING:
    from fakeplugin.drivers.computedomain import ComputeDomainDriver
    from fakeplugin.drivers.gpu import GpuDriver
    from fakeplugin.kube import Kube
    from fakeplugin.runtime.driver import NodePlugin

log = logging.getLogger("fakeplugin.serve")

EPILOG = """\
what it does:
  1. reads the inventory and picks this node's entry (by name, else by node-label selector)
  2. serves the kubelet's DRA gRPC API (v1 and v1beta1) on <plugins-dir>/<driver>/dra.sock and
     registers through <registrar-dir>/<driver>-reg.sock
  3. publishes this node's ResourceSlices and keeps them in place (re-created if deleted,
     updated in place when the inventory file or the node's labels change); watches its Node for
     the fakeplugin.dev/device-faults annotation (`fakeplugin fault node`): taints, health
  4. answers NodePrepareResources with CDI specs in --cdi-root, checkpointed in the plugins dir
  5. with --telemetry-endpoint: serves this node's GPUs as NVIDIA's dcgm-exporter does (/metrics,
     DCGM_FI_* series), each container's devices named by the kubelet's PodResources List
     (--pod-resources-kubelet-socket) with pod, namespace, container and dra_* labels; load them with
     `fakeplugin fault pod|claim NS/NAME --gpu-load 90` (docs/telemetry.md)
  6. with --nvml-library: each claim's containers get the mock NVML library (the copy installed under
     the plugins dir at start) and a description of exactly their devices, so NVML-based software
     (pynvml, Ray, go-nvml) lists the claim's GPUs; the image ships it (/opt/fakeplugin/nvml/)

--plugin picks which of NVIDIA's two kubelet plugins this is (the chart runs both on a GPU node):
  gpus             gpu.nvidia.com: the node's GPUs, MIG devices, opaque GpuConfig/MigDeviceConfig
  compute-domains  compute-domain.nvidia.com (compute-domain.<rest> for --driver-name gpu.<rest>):
                   devices channel-0 and daemon-0; a channel claim labels the node
                   resource.nvidia.com/computeDomain=<cdUID>, waits (retryable error) until this node
                   is Ready in the domain's ComputeDomainClique in --namespace, then gets
                   /dev/nvidia-caps-imex-channels/channel0 (the inventory's nodes[].fabric: its clique)

examples:
  NODE_NAME=gpu-node-1 fakeplugin serve --inventory /etc/fakeplugin/inventory.yaml
  fakeplugin -v 6 serve --inventory inv.yaml --node-name n1 --kubeconfig ~/.kube/config \\
      --kubelet-registrar-directory-path /tmp/kl/plugins_registry \\
      --kubelet-plugins-directory-path /tmp/kl/plugins --cdi-root /tmp/kl/cdi
  NODE_NAME=gpu-node-1 fakeplugin serve --inventory inv.yaml --telemetry-endpoint 127.0.0.1:9400
  NODE_NAME=gpu-node-1 fakeplugin serve --inventory inv.yaml \\
      --nvml-library ~/.cache/fakeplugin/nvml/<hash>/libnvidia-ml.so.1
  NODE_NAME=gb200-rack-a-0 NAMESPACE=nvidia-dra-driver-gpu fakeplugin serve --plugin compute-domains \\
      --inventory /etc/fakeplugin/inventory.yaml
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run as the kubelet plugin of one node",
        description="Run fakeplugin as the DRA kubelet plugin of one node: register with the kubelet,\n"
        "publish ResourceSlices, answer NodePrepareResources/NodeUnprepareResources with CDI specs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--inventory", "--node-name", "--plugin")
    emulation_flags(p, device_nodes=True)
    shared_flags(p, "--namespace")
    flag(
        p,
        "--cdi-root",
        env="CDI_ROOT",
        default="/var/run/cdi",
        metavar="DIR",
        help="where CDI spec files are written for the container runtime",
    )
    flag(
        p,
        "--kubelet-registrar-directory-path",
        env="KUBELET_REGISTRAR_DIRECTORY_PATH",
        default=str(KUBELET_REGISTRY_DIR),
        metavar="DIR",
        help="the kubelet's plugin registration dir",
    )
    flag(
        p,
        "--kubelet-plugins-directory-path",
        env="KUBELET_PLUGINS_DIRECTORY_PATH",
        default=str(KUBELET_PLUGINS_DIR),
        metavar="DIR",
        help="the kubelet's plugins dir; ours is <dir>/<driver> (DRA socket, checkpoint, lock)",
    )
    shared_flags(p, "--pod-uid")
    flag(
        p,
        "--healthcheck-port",
        env="HEALTHCHECK_PORT",
        default=-1,
        type=int,
        metavar="PORT",
        help="TCP port of the grpc.health.v1 service for liveness probes; -1 disables it",
    )
    flag(
        p,
        "--healthcheck-address",
        env="HEALTHCHECK_ADDRESS",
        default="127.0.0.1",
        metavar="ADDR",
        help="address the health service binds to (0.0.0.0 in a pod, so the kubelet can probe it)",
    )
    shared_flags(p, "--kubeconfig")
    flag(
        p,
        "--boot-id-file",
        env="BOOT_ID_FILE",
        default=str(BOOT_ID_FILE),
        metavar="FILE",
        help="file holding the node's boot ID (prepared claims from an earlier boot are forgotten)",
    )
    flag(
        p,
        "--http-endpoint",
        env="HTTP_ENDPOINT",
        default="",
        metavar="HOST:PORT",
        help="serve Prometheus metrics (NVIDIA's nvidia_dra_* names) on this address, e.g. :8080; empty: off",
    )
    telemetry_flags(p)
    flag(
        p,
        "--pod-resources-kubelet-socket",
        env="DCGM_POD_RESOURCES_KUBELET_SOCKET",
        default="/var/lib/kubelet/pod-resources/kubelet.sock",
        metavar="FILE",
        help="with --telemetry-endpoint: the kubelet's PodResources socket (dcgm-exporter's flag and "
        "variable), whose List names each container's claim devices; missing: no pod labels",
    )
    flag(
        p,
        "--device-health",
        env="DEVICE_HEALTH",
        action="store_true",
        help="serve the kubelet's DRA health API (v1alpha1/v1.DRAResourceHealth), which no NVIDIA release "
        "serves, as its PR #1243 designs it: GPU plugin only, with feature gate NVMLDeviceHealthCheck; GPUs "
        "and MIG devices start Healthy, fakeplugin.dev/device-faults makes them Unhealthy until a restart; "
        "pods show it in allocatedResourcesStatus (kubelet gate ResourceHealthStatus). Without it the "
        "kubelet's call gets Unimplemented, as from NVIDIA's releases",
    )
    flag(
        p,
        "--emulate-daemon",
        env="EMULATE_DAEMON",
        action="store_true",
        help="compute-domains: do the ComputeDomain daemon's part when a daemon claim is prepared (clique "
        "entry, Ready) and unprepared (entry removed), for runtimes that run no container",
    )
    flag(
        p,
        "--gpu-clique-label-enabled",
        env="GPU_CLIQUE_LABEL_ENABLED",
        action="store_true",
        help="compute-domains: set the nvidia.com/gpu.clique node label (historically set by "
        "gpu-feature-discovery) to the node's clique ID at start and when it changes; removed at stop",
    )
    shared_flags(p, "--gpu-operator-labels", "--binding-conditions", "--device-status", "--nvml-library")
    p.set_defaults(func=run)


def nvml_library(value: str, plugin: str) -> Path | None:
    """--nvml-library checked at start: None when empty, else its absolute path; ValueError names the flag
    and the path when it is no library (missing, not a file, unreadable, no ELF header) or the plugin is
    not the GPU plugin."""
    if not value:
        return None
    if plugin == COMPUTE_DOMAINS:
        raise ValueError(f"--nvml-library {value}: only with --plugin gpus (compute-domains has no GPUs)")
    path = Path(value).absolute()  # a CDI mount's host path is absolute
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise ValueError(f"--nvml-library {path}: no such file") from None
    except OSError as e:  # a directory, no permission
        raise ValueError(f"--nvml-library {path}: cannot read it: {e.strerror or e}") from None
    if not path.is_file():
        raise ValueError(f"--nvml-library {path}: not a regular file")
    if head != b"\x7fELF":
        raise ValueError(
            f"--nvml-library {path}: not a shared library (no ELF header); build it with "
            "fakeplugin.nvml.build.build(cache_root)"
        )
    return path


def run(args: argparse.Namespace) -> int:
    from fakeplugin.drivers.gpu import GpuDriver
    from fakeplugin.faults import devicehealth
    from fakeplugin.inventory.file import InventoryFile
    from fakeplugin.kube import NODES, Kube, new_api_client
    from fakeplugin.runtime.bootid import read_boot_id
    from fakeplugin.runtime.claims import CheckedClaims
    from fakeplugin.runtime.driver import DeviceHealth, NodeDirs
    from fakeplugin.runtime.host import Host
    from fakeplugin.runtime.nodes import Nodes
    from fakeplugin.server import ServerSettings
    from fakeplugin.server import run as run_server

    if not args.inventory:
        raise ValueError("--inventory (or FAKEPLUGIN_INVENTORY) is required: the inventory file")
    if not args.node_name:
        raise ValueError("--node-name (or NODE_NAME) is required")
    if args.device_status and args.plugin == COMPUTE_DOMAINS:
        raise ValueError("--device-status reports GPU and MIG devices: only with --plugin gpus")
    if args.gpu_operator_labels and args.plugin == COMPUTE_DOMAINS:
        raise ValueError("--gpu-operator-labels: only with --plugin gpus (one plugin labels the node)")
    library = nvml_library(args.nvml_library, args.plugin)  # before any connection
    inventory = InventoryFile(Path(args.inventory))  # InventoryError names the file and field
    driver_name = plugin_driver_name(args)
    emulation = emulated(args, inventory.inventory.driver_release, driver_name)
    log.info("fakeplugin for node %s: %s", args.node_name, emulation.describe())
    threads = ServerSettings.threads
    # A connection per DRA worker thread (any may run a Prepare: its claim GET), plus the publisher's watch
    # and its writes, plus the node watch, plus telemetry's reads of load annotations.
    kube = Kube(new_api_client(args.kubeconfig or None, connections=threads + DRA_EXTRA_THREADS + 4))
    boot_id = read_boot_id(Path(args.boot_id_file))  # BootIdError: fatal at start
    if library is not None:
        log.info("NVML: claims' containers get the mock library %s and their devices' descriptions", library)
    driver: GpuDriver | ComputeDomainDriver = GpuDriver(
        emulation,
        device_status=kube.replace if args.device_status else None,
        node_labels=(lambda name, body: kube.patch(f"{NODES}/{name}", body))
        if args.gpu_operator_labels
        else None,
        nvml_library=library,
    )
    if args.plugin == COMPUTE_DOMAINS:  # imported only here: the GPU plugin's start need not pay for it
        from fakeplugin.drivers.computedomain import ComputeDomainDriver, DomainClient

        driver = ComputeDomainDriver(
            emulation,
            DomainClient(kube),
            namespace=args.namespace,
            emulate_daemon=args.emulate_daemon,
            gpu_clique_label=args.gpu_clique_label_enabled,
            binding_conditions=args.binding_conditions,
        )
    dirs = NodeDirs(
        cdi_root=Path(args.cdi_root),
        plugin_dir=Path(args.kubelet_plugins_directory_path) / driver_name,
    )
    nodes = Nodes(
        inventory,
        lambda name: driver.node(name, inventory, dirs=dirs, boot_id=boot_id, get_claim=kube.get_claim),
    )
    if isinstance(driver, GpuDriver):  # Prepare may change what the node publishes (PassthroughSupport)
        driver.slices_changed = nodes.changed.set
    plugin = nodes.add(args.node_name)  # ValueError names the entry
    plugin.open()  # a corrupt checkpoint or a held node lock is fatal at start
    stop = threading.Event()
    if args.telemetry_endpoint or library is not None:
        start_telemetry(args, plugin, kube, dirs.plugin_dir, stop, nvml=library is not None)
    Host(kube, emulation, nodes, node=args.node_name).start(stop)
    if args.http_endpoint:
        port = metrics.serve(args.http_endpoint)
        log.info("metrics on %s (port %d)", args.http_endpoint, port)
    unserved = devicehealth.not_served(args.device_health, args.plugin, emulation.feature_gates)
    if args.device_health and unserved:
        log.warning("--device-health: the DRA health service is not served: %s", unserved)
    # An optional capability (runtime.driver): the GPU driver's nodes have it, ComputeDomain nodes not.
    device_health = plugin.health_state if not unserved and isinstance(plugin, DeviceHealth) else None
    settings = ServerSettings(
        threads=threads,
        driver_name=driver_name,
        registrar_dir=Path(args.kubelet_registrar_directory_path),
        plugins_dir=Path(args.kubelet_plugins_directory_path),
        pod_uid=args.pod_uid,
        health_address=args.healthcheck_address,
        health_port=args.healthcheck_port,
        verbosity=args.verbosity,
        device_health=device_health is not None,
        device_health_pool=args.node_name,
        device_health_devices=plugin.devices,
        device_health_of=device_health,
    )
    try:
        run_server(CheckedClaims(plugin, kube.get_claim), settings)
    finally:
        stop.set()
        nodes.close()  # e.g. compute-domains' node label (--gpu-clique-label-enabled)
    log.info("stopped; ResourceSlices are left to the kubelet (as upstream drivers do)")
    return 0


def start_telemetry(
    args: argparse.Namespace,
    plugin: NodePlugin,
    kube: Kube,
    plugin_dir: Path,
    stop: threading.Event,
    *,
    nvml: bool,
) -> None:
    """This node's GPUs, attributed by the kubelet's PodResources List: --telemetry-endpoint's `/metrics`,
    and with `nvml` (--nvml-library) the live values of the claims' NVML (telemetry.nvmllive). A bad flag or
    counters file is fatal at start."""
    from fakeplugin.runtime.driver import DeviceStates
    from fakeplugin.telemetry.podresources import PodResources
    from fakeplugin.telemetry.source import KubeletAttribution
    from fakeplugin.telemetry.start import start_endpoint

    if not isinstance(plugin, DeviceStates):  # an optional capability (runtime.driver)
        raise ValueError("--telemetry-endpoint: only with --plugin gpus (compute-domains has no GPUs)")
    attribution = KubeletAttribution(PodResources(Path(args.pod_resources_kubelet_socket)), kube.get)
    if args.telemetry_endpoint:
        start_endpoint(args, lambda: [plugin], attribution)
    if nvml:
        from fakeplugin.telemetry.nvmllive import start_live  # only with the library (test_serve_imports)

        start_live(plugin, attribution, plugin_dir, stop)
