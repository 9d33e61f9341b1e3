"""`fakeplugin fleet`: the DRA side of every kwok-simulated node, in one process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from fakeplugin.commands import (
    PLUGINS,
    compute_domain_driver_name,
    emulated,
    emulation_flags,
    flag,
    shared_flags,
    telemetry_flags,
)
from fakeplugin.commands.view import view_flags

if TYPE_CHECKING:
    from fakeplugin.fleet.api import FleetKube
    from fakeplugin.fleet.fleet import Fleet
    from fakeplugin.runtime.driver import Driver

log = logging.getLogger("fakeplugin.fleet")

VIEW_WATCHES = 9  # fakeplugin.view.objects.kinds and the two CRD watches

DESCRIPTION = """\
Be the DRA half of the kubelet of every node kwok simulates (sigs.k8s.io/kwok), in one process:
publish each GPU node's ResourceSlices exactly as `fakeplugin serve` would on that node, and prepare
the claims of each pod bound there with the same prepare core (CDI spec, checkpoint, sharing configs,
nvidia-smi data) before kwok may make the pod Running; unprepare when the pod is deleted.

The nodes served are the Node objects kwok manages (annotation kwok.x-k8s.io/node=fake); what each
publishes comes from the inventory (by name, namePrefix + replicas, or label selector). With
--create-nodes the fleet makes those Node objects itself, for the inventory's `kubelet: false` nodes, and
keeps them as the inventory says (the chart's fleet mode: docs/chart-fleet.md), GPU Operator labels included;
without it, --gpu-operator-labels keeps those labels on the Nodes someone else made (`cluster up`,
Karpenter) as `serve --gpu-operator-labels` does on its own. kwok must run
with the config of --print-kwok-config: its stages hold pods that use claims until the fleet annotated
them fakeplugin.dev/prepared (and, when deleted, fakeplugin.dev/unprepared). A failed prepare leaves the pod
Pending with the kubelet's FailedPrepareDynamicResources event and is retried.

Like a kubelet it reconciles on start, on every re-list of the pods and every minute: claims its nodes'
checkpoints hold that no active pod there uses, or whose ResourceClaim is gone, are unprepared (pods
force-deleted while it was down, say); records of gone pods and the files of deleted nodes are removed.
Restarting it after a crash is safe: pods bound meanwhile are prepared (docs/local-cluster.md).

With --compute-domains every simulated node also runs NVIDIA's second kubelet plugin, the ComputeDomain
driver (compute-domain.nvidia.com, or compute-domain.<rest> for --driver-name gpu.<rest>; IMEX channels
and daemons, docs/compute-domains.md), and since no container
runs on a simulated node, the fleet plays each ComputeDomain daemon's part when its daemon claim is
prepared: it labels the daemon pod, enters the node into its ComputeDomainClique and marks it Ready.
The ComputeDomain controller (`fakeplugin compute-domain-controller`) must run in the cluster.

With --telemetry-endpoint the fleet serves one dcgm-exporter-compatible /metrics for all its nodes (the
hostname label is the node), each container's devices derived from its pod and claims as the node's
kubelet would list them (pod, namespace, container, dra_* labels; docs/telemetry.md).
"""

EPILOG = """\
examples:
  fakeplugin fleet --print-kwok-config > kwok.yaml
  kwok --kubeconfig ~/.kube/config --config kwok.yaml \\
      --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake &
  fakeplugin fleet --inventory fleet.yaml --kubeconfig ~/.kube/config --nodes-dir /tmp/fleet
  fakeplugin fleet --inventory fleet.yaml --nodes-dir /tmp/fleet --shard 0/2 &     # two processes
  fakeplugin fleet --inventory fleet.yaml --nodes-dir /tmp/fleet --shard 1/2 &     # for one fleet
  fakeplugin fleet --inventory fleet.yaml --create-nodes my-fleet    # it makes the Nodes, too
  fakeplugin fleet --inventory fleet.yaml --nodes-dir /tmp/fleet --telemetry-endpoint 127.0.0.1:9400
  fakeplugin fleet --inventory examples/gb200-nvl72.yaml --compute-domains \\
      --namespace nvidia-dra-driver-gpu --nodes-dir /tmp/fleet     # NVL72 racks with ComputeDomains

files: <nodes-dir>/<node>/cdi (CDI specs), plugins/<driver>/ (checkpoint, nvidia-smi data) and
containers/<namespace>_<pod>_<container>.json (what each container would receive: CDI IDs, env, mounts).
`fakeplugin cluster up` starts kwok and the fleet for every `kubelet: false` node by itself, its nodes
dir the state dir's nodes/.

--view-endpoint also serves the fleet view (`fakeplugin view`: a live web page of the nodes and their
GPUs) from this process, e.g. --view-endpoint 127.0.0.1:8470.
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fleet",
        help="publish and prepare for every kwok-simulated node, in one process",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--inventory", "--kubeconfig")
    emulation_flags(p, device_nodes=True)
    flag(
        p,
        "--nodes-dir",
        env="FAKEPLUGIN_FLEET_NODES_DIR",
        default="/var/lib/fakeplugin-fleet",
        metavar="DIR",
        help="the simulated nodes' files: DIR/<node>/ holds a node's CDI specs, plugin dirs (checkpoint, "
        "nvidia-smi data) and container records",
    )
    flag(
        p,
        "--threads",
        env="FAKEPLUGIN_FLEET_THREADS",
        default=8,
        type=int,
        metavar="N",
        help="threads preparing pods and writing slices (and API connections)",
    )
    flag(
        p,
        "--compute-domains",
        env="FAKEPLUGIN_FLEET_COMPUTE_DOMAINS",
        action="store_true",
        help="also run the ComputeDomain driver (compute-domain.nvidia.com, named after --driver-name) on "
        "every simulated node, doing each ComputeDomain daemon's part (clique entry, Ready) when its "
        "daemon claim is prepared",
    )
    shared_flags(
        p, "--binding-conditions", "--namespace", "--device-status", "--gpu-operator-labels", "--nvml-library"
    )
    flag(
        p,
        "--shard",
        env="FAKEPLUGIN_FLEET_SHARD",
        default="0/1",
        metavar="i/n",
        help="serve only shard i of n of the simulated nodes, by a stable hash of the node name: run n "
        "fleets, --shard 0/n .. n-1/n, to spread the nodes over n processes or machines",
    )
    flag(
        p,
        "--manage-nodes-with-label-selector",
        env="FAKEPLUGIN_FLEET_NODE_SELECTOR",
        dest="label_selector",
        default="",
        metavar="SELECTOR",
        help="serve only the simulated Nodes this label selector matches (kwok's flag of the same name: one "
        "fleet per kwok shard, by the same selector)",
    )
    flag(
        p,
        "--create-nodes",
        env="FAKEPLUGIN_FLEET_CREATE_NODES",
        default="",
        metavar="OWNER",
        help="create the Node objects of the inventory's `kubelet: false` nodes (this shard's), labelled "
        "fakeplugin.dev/fleet=OWNER, and keep them as the inventory says: relabel, delete those it drops "
        "(without this, someone else creates them: `cluster up`, or you)",
    )
    flag(
        p,
        "--owner-cluster-role",
        env="FAKEPLUGIN_FLEET_OWNER_CLUSTER_ROLE",
        default="",
        metavar="NAME",
        help="with --create-nodes: the Nodes are owned by this ClusterRole (an ownerReference): deleting it "
        "deletes them and their ResourceSlices, fleet running or not (the chart: the fleet's ClusterRole)",
    )
    telemetry_flags(p)
    shared_flags(p, "--view-endpoint")
    view_flags(p)
    p.add_argument(
        "--print-kwok-config",
        action="store_true",
        help="print the kwok --config file the fleet needs (its KwokConfiguration and Stages) and exit",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from fakeplugin.fleet.stages import kwok_config_yaml

    if args.print_kwok_config:
        sys.stdout.write(kwok_config_yaml())
        return 0
    if not args.inventory:
        raise ValueError("--inventory (or FAKEPLUGIN_INVENTORY) is required: the inventory file")
    if args.threads < 1:
        raise ValueError(f"--threads: {args.threads}: must be at least 1")
    from fakeplugin.fleet.shard import parse_shard

    shard = parse_shard(args.shard)
    from fakeplugin.commands.serve import nvml_library

    library = nvml_library(args.nvml_library, PLUGINS[0])  # the GPU plugin's; before any connection
    if args.create_nodes and args.label_selector:
        raise ValueError(
            "--create-nodes with --manage-nodes-with-label-selector: a fleet that creates its Nodes shards "
            "them with --shard only"
        )
    if args.gpu_operator_labels and args.create_nodes:
        raise ValueError(
            "--gpu-operator-labels with --create-nodes: the Nodes the fleet creates carry the GPU Operator's "
            "labels already (kept with their other inventory labels)"
        )
    if args.owner_cluster_role and not args.create_nodes:
        raise ValueError(
            "--owner-cluster-role: only with --create-nodes (it owns the Nodes the fleet creates)"
        )

    from fakeplugin.fleet import malloc
    from fakeplugin.fleet.api import FleetKube
    from fakeplugin.fleet.fleet import Fleet
    from fakeplugin.inventory.file import InventoryFile
    from fakeplugin.kube import new_api_client
    from fakeplugin.runtime.bootid import read_boot_id

    malloc.fix_thresholds()  # before the fleet allocates: RSS flat under churn (fleet.malloc)
    inventory = InventoryFile(Path(args.inventory))  # InventoryError names the file and field
    # Per driver: its node and slice watches and writers; a connection per pod worker; the pod watch;
    # telemetry's claim watch; the ComputeDomain watch; the view's watches.
    connections = 3 * args.threads + 7 + (VIEW_WATCHES if args.view_endpoint else 0)
    kube = FleetKube(new_api_client(args.kubeconfig or None, connections=connections))
    drivers = fleet_drivers(args, inventory.inventory.driver_release, kube, library)
    node_owner = None
    if args.create_nodes:
        from fakeplugin.fleet.nodeobjects import NodeOwner, cluster_role_owner

        owner_ref = cluster_role_owner(kube, args.owner_cluster_role) if args.owner_cluster_role else None
        node_owner = NodeOwner(kube, inventory, owner=args.create_nodes, owns=shard.owns, owner_ref=owner_ref)
    fleet = Fleet(
        kube,
        inventory=inventory,
        drivers=drivers,
        boot_id=read_boot_id(),  # the host's: the simulated nodes share its boots
        nodes_dir=Path(args.nodes_dir),
        threads=args.threads,
        shard=shard,
        label_selector=args.label_selector,
        node_owner=node_owner,
    )
    from fakeplugin.drivers.gpu import GpuDriver

    for driver in drivers:
        if isinstance(driver, GpuDriver):  # Prepare may change what a node publishes (PassthroughSupport)
            driver.slices_changed = fleet.nodes[driver.name].changed.set
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    for driver in drivers:
        log.info("fleet for %s", driver.emulation.describe())
    if shard.count > 1 or args.label_selector:
        log.info(
            "serving shard %s of the simulated nodes%s",
            shard,
            f" matching {args.label_selector}" if args.label_selector else "",
        )
    log.info("node files in %s", args.nodes_dir)
    if args.telemetry_endpoint:
        start_telemetry(args, fleet, kube, stop)  # a bad flag or counters file is fatal at start
    if args.view_endpoint:
        from fakeplugin.commands.view import start

        start(args, kube, args.view_endpoint, stop, "--view-endpoint")
    fleet.run(stop)
    log.info("stopped; ResourceSlices stay (a node's kubelet would leave them too)")
    return 0


def fleet_drivers(
    args: argparse.Namespace, inventory_release: str, kube: FleetKube, nvml_library: Path | None = None
) -> list[Driver]:
    """The drivers every simulated node runs: the GPU driver --driver-name names (its claims' containers
    get `nvml_library`, --nvml-library checked) and, with --compute-domains, its ComputeDomain driver
    (commands.compute_domain_driver_name)."""
    from fakeplugin.drivers.computedomain import ComputeDomainDriver, DomainClient
    from fakeplugin.drivers.gpu import GpuDriver
    from fakeplugin.kube import NODES

    # No fsync of the simulated nodes' checkpoints (a third of the fleet's time on 5000 nodes, issue 20):
    # the rename is atomic, so a kill -9 of the fleet leaves each checkpoint old or new, and the page cache
    # outlives the process; only a crash of the machine loses unsynced writes, and that is a new boot,
    # whose checkpoints start empty anyway (prepare.checkpoint: one boot ID per checkpoint).
    gpu = emulated(args, inventory_release, args.driver_name)
    device_status = kube.replace if args.device_status else None
    # --gpu-operator-labels: each node's GPU plugin keeps its Node's labels, as `serve`'s does its own
    # (drivers.gpu.labeller): the nodes someone else made (`cluster up`, Karpenter), by name or selector.
    node_labels = None
    if args.gpu_operator_labels:
        node_labels = lambda name, body: kube.patch(f"{NODES}/{name}", body)  # noqa: E731
    drivers: list[Driver] = [
        GpuDriver(
            gpu,
            sync_checkpoints=False,
            device_status=device_status,
            node_labels=node_labels,
            nvml_library=nvml_library,
        )
    ]
    if args.compute_domains:
        cd = emulated(args, inventory_release, compute_domain_driver_name(args.driver_name))
        drivers.append(
            ComputeDomainDriver(
                cd,
                DomainClient(kube),  # one ComputeDomain informer for every node of the fleet
                namespace=args.namespace,
                emulate_daemon=True,
                retry_seconds=0,
                binding_conditions=args.binding_conditions,
            )
        )
    return drivers


def start_telemetry(args: argparse.Namespace, fleet: Fleet, kube: FleetKube, stop: threading.Event) -> None:
    """--telemetry-endpoint: one /metrics for every node of the fleet, uses derived from its pods and a
    ResourceClaim watch."""
    from fakeplugin.runtime.driver import DeviceStates
    from fakeplugin.telemetry.source import ClaimWatch, FleetAttribution, NodeView
    from fakeplugin.telemetry.start import start_endpoint

    gpus = fleet.nodes[args.driver_name]  # the GPU driver's nodes (fleet_drivers: first, --driver-name)

    def nodes() -> list[NodeView]:
        return [p for name in gpus.names() if isinstance(p := gpus.get(name), DeviceStates)]

    claims = ClaimWatch()
    start_endpoint(args, nodes, FleetAttribution(fleet.kubelet.pods_on, claims))
    threading.Thread(target=claims.run, args=(kube, stop), name="telemetry-claims", daemon=True).start()
