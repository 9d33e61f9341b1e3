"""`fakeplugin serve`: run as the kubelet plugin of one node (what the DaemonSet runs)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fakeplugin import DEFAULT_DRIVER_NAME, consumableshares, featuregates, releases
from fakeplugin.commands import consumable_shares_flag, flag
from fakeplugin.server import metrics

if TYPE_CHECKING:
    from fakeplugin.kube import Kube
    from fakeplugin.publish.node import NodeDevices
    from fakeplugin.publish.publisher import Publisher

log = logging.getLogger("fakeplugin.serve")

INVENTORY_POLL_SECONDS = 5.0
# The node watch: the API server ends it after this long and it starts again from a fresh GET.
NODE_WATCH_SECONDS = 300
MAX_BACKOFF_SECONDS = 60.0

EPILOG = """\
what it does:
  1. reads the inventory and picks this node's entry (by name, else by node-label selector)
  2. serves the kubelet's DRA gRPC API (v1 and v1beta1) on <plugins-dir>/<driver>/dra.sock and
     registers through <registrar-dir>/<driver>-reg.sock
  3. publishes this node's ResourceSlices and keeps them in place (re-created if deleted,
     updated in place when the inventory file or the node's labels change); watches its Node for
     the fakeplugin.dev/device-faults annotation (`fakeplugin fault node`): taints, health
  4. answers NodePrepareResources with CDI specs in --cdi-root, checkpointed in the plugins dir

examples:
  NODE_NAME=gpu-node-1 fakeplugin serve --config /etc/fakeplugin/inventory.yaml
  fakeplugin -v 6 serve --config inv.yaml --node-name n1 --kubeconfig ~/.kube/config \\
      --kubelet-registrar-directory-path /tmp/kl/plugins_registry \\
      --kubelet-plugins-directory-path /tmp/kl/plugins --cdi-root /tmp/kl/cdi
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
    flag(
        p,
        "--config",
        env="FAKEPLUGIN_CONFIG",
        required=False,
        metavar="FILE",
        help="inventory YAML describing the fleet's GPUs (see examples/seed-lab.yaml)",
    )
    flag(p, "--node-name", env="NODE_NAME", metavar="NAME", help="this node's name")
    flag(
        p,
        "--driver-name",
        env="DRIVER_NAME",
        default=DEFAULT_DRIVER_NAME,
        metavar="NAME",
        help="DRA driver name; change it to run beside NVIDIA's real driver",
    )
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
        default="/var/lib/kubelet/plugins_registry",
        metavar="DIR",
        help="the kubelet's plugin registration dir",
    )
    flag(
        p,
        "--kubelet-plugins-directory-path",
        env="KUBELET_PLUGINS_DIRECTORY_PATH",
        default="/var/lib/kubelet/plugins",
        metavar="DIR",
        help="the kubelet's plugins dir; ours is <dir>/<driver> (DRA socket, checkpoint, lock)",
    )
    flag(
        p,
        "--pod-uid",
        env="POD_UID",
        default="",
        metavar="UID",
        help="the plugin pod's UID: socket names carry it, so old and new pods overlap in rolling updates",
    )
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
    flag(
        p,
        "--kubeconfig",
        env="KUBECONFIG",
        default="",
        metavar="FILE",
        help="kubeconfig; empty: the in-cluster service account, else ~/.kube/config",
    )
    flag(
        p,
        "--feature-gates",
        env="FEATURE_GATES",
        default="",
        metavar="LIST",
        help="NVIDIA driver feature gates, e.g. TimeSlicingSettings=true; known (by release): "
        + ", ".join(featuregates.KNOWN),
    )
    flag(
        p,
        "--driver-release",
        env="DRIVER_RELEASE",
        default="",
        metavar="RELEASE",
        help="NVIDIA driver release to emulate (its gates, slice names, opaque config rules); empty: the "
        f"inventory's driverRelease, read once at start; known: {releases.known()}",
    )
    consumable_shares_flag(p)
    flag(
        p,
        "--boot-id-file",
        env="BOOT_ID_FILE",
        default="/proc/sys/kernel/random/boot_id",
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
    flag(
        p,
        "--device-health",
        env="DEVICE_HEALTH",
        action="store_true",
        help="also serve the kubelet's DRA health API (v1alpha1.DRAResourceHealth), reporting every device "
        "Healthy unless the node's fakeplugin.dev/device-faults says otherwise; pods then show it in "
        "allocatedResourcesStatus (kubelet gate ResourceHealthStatus)",
    )
    flag(
        p,
        "--fake-device-nodes",
        env="FAKE_DEVICE_NODES",
        action="store_true",
        help="CDI specs also inject /dev/nvidia<minor>, /dev/nvidiactl and /dev/nvidia-uvm* as character "
        "devices (the runtime creates them; nothing on the host is needed)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fakeplugin.kube import Kube, new_api_client
    from fakeplugin.prepare.preparer import Preparer
    from fakeplugin.publish.inventory import load_inventory
    from fakeplugin.publish.node import NodeDevices
    from fakeplugin.publish.publisher import Publisher
    from fakeplugin.server import ServerSettings
    from fakeplugin.server import run as run_server

    if not args.config:
        raise ValueError("--config (or FAKEPLUGIN_CONFIG) is required: the inventory file")
    if not args.node_name:
        raise ValueError("--node-name (or NODE_NAME) is required")
    release = releases.get(args.driver_release or load_inventory(args.config).driver_release)
    gates = featuregates.parse(args.feature_gates, release)
    shares = consumableshares.parse(args.consumable_shares, gates, release)
    release = release.with_gates(gates)  # DRAListTypeAttributes: the form of numaNode
    enabled = sorted(g for g, on in gates.items() if on and not release.feature_gates[g])
    log.info(
        "fakeplugin %s for node %s, emulating NVIDIA driver %s (commit %s, k8s libraries %s)%s",
        args.driver_name,
        args.node_name,
        release.tag,
        release.commit[:8],
        release.k8s_libs,
        f" (feature gates: {', '.join(enabled)})" if enabled else "",
    )
    if shares != consumableshares.DISABLED:
        log.info("consumable shares: %s", shares)

    # Known by name in the inventory: the devices are ready before the API server answers.
    devices = NodeDevices(
        Path(args.config),
        args.node_name,
        driver=args.driver_name,
        dynamic_mig=gates["DynamicMIG"],
        release=release,
        consumable_shares=shares,
    )
    workers = ServerSettings.workers
    # A connection per worker thread, plus the publisher's watch and its writes, plus the node watch.
    kube = Kube(new_api_client(args.kubeconfig or None, connections=workers + 3))
    plugin_dir = Path(args.kubelet_plugins_directory_path) / args.driver_name

    server_version: list[tuple[int, int]] = []  # asked once, on the first publish

    def desired_slices() -> list[dict]:
        node = kube.get_node(args.node_name)
        devices.set_node(node.labels, node.uid, node.annotations)
        if not server_version:
            server_version.append(kube.server_version())
            log.info("API server %d.%d: slices laid out for it", *server_version[0])
        return devices.desired_slices(server_version[0])

    preparer = Preparer(
        driver_name=args.driver_name,
        node_name=args.node_name,
        devices=devices,
        get_claim=kube.get_claim,
        cdi_root=Path(args.cdi_root),
        plugin_dir=plugin_dir,
        boot_id_file=Path(args.boot_id_file),
        feature_gates=gates,
        release=release,
        consumable_shares=shares,
        device_nodes=args.fake_device_nodes,
    )
    publisher = Publisher(
        kube, driver=args.driver_name, node_name=args.node_name, desired=desired_slices, release=release
    )
    stop = threading.Event()
    threads = [
        threading.Thread(target=publisher.run, args=(stop,), name="publisher", daemon=True),
        threading.Thread(
            target=_watch_inventory, args=(devices, publisher, stop), name="inventory", daemon=True
        ),
        threading.Thread(target=_watch_node, args=(kube, devices, publisher, stop), name="node", daemon=True),
    ]
    for t in threads:
        t.start()
    if args.http_endpoint:
        port = metrics.serve(args.http_endpoint)
        log.info("metrics on %s (port %d)", args.http_endpoint, port)
    settings = ServerSettings(
        workers=workers,
        driver_name=args.driver_name,
        registrar_dir=Path(args.kubelet_registrar_directory_path),
        plugins_dir=Path(args.kubelet_plugins_directory_path),
        pod_uid=args.pod_uid,
        health_address=args.healthcheck_address,
        health_port=args.healthcheck_port,
        verbosity=args.verbosity,
        device_health=args.device_health,
        device_health_pool=args.node_name,
        device_health_devices=devices,
        device_health_of=lambda name: (f.healthy, f.message) if (f := devices.fault(name)) else None,
    )
    try:
        asyncio.run(run_server(preparer, settings))
    finally:
        stop.set()
    log.info("stopped; ResourceSlices are left to the kubelet (as upstream drivers do)")
    return 0


def _watch_inventory(devices: NodeDevices, publisher: Publisher, stop: threading.Event) -> None:
    while not stop.wait(INVENTORY_POLL_SECONDS):
        try:
            if devices.reload_if_changed():
                publisher.wake.set()
        except OSError as exc:  # e.g. a ConfigMap symlink swap in progress: try again next time
            log.warning("reading inventory failed: %s", exc)


def _watch_node(kube: Kube, devices: NodeDevices, publisher: Publisher, stop: threading.Event) -> None:
    """Follow this node's labels and device-faults annotation: a watch on this one Node (field selector
    on its name; RBAC `watch` on nodes) wakes the publisher within seconds of an annotation change, and
    costs the API server one idle watch per node instead of a GET per node every few seconds."""
    backoff = 1.0
    while not stop.is_set():
        try:
            node = kube.get_node(devices.node_name)
            if devices.set_node(node.labels, node.uid, node.annotations):
                publisher.wake.set()
            for changed in kube.watch_node(
                devices.node_name, resource_version=node.resource_version, timeout_seconds=NODE_WATCH_SECONDS
            ):
                if devices.set_node(changed.labels, changed.uid, changed.annotations):
                    publisher.wake.set()
            backoff = 1.0
        except Exception as exc:  # never fatal: the publisher still reads the node on every sync
            log.warning("watching node %s failed: %s; retrying in %.0f s", devices.node_name, exc, backoff)
            stop.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
