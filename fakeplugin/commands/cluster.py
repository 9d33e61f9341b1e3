"""`fakeplugin cluster`: a real local Kubernetes cluster, 1.34 to 1.38 (no Docker), for tests and demos."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from fakeplugin.commands import flag, shared_flags

if TYPE_CHECKING:
    from fakeplugin.cluster.karpenter import KarpenterRequest
    from fakeplugin.cluster.keda import KedaRequest
    from fakeplugin.cluster.kueue import KueueRequest
    from fakeplugin.cluster.prometheus import PrometheusRequest

EPILOG = """\
what `up` runs (all on 127.0.0.1, free ports, processes detached and recorded in the state dir):
  etcd, kube-apiserver, kube-scheduler, kube-controller-manager (node-lifecycle controller off);
  per inventory node with `kubelet: true` (default for GPU nodes): a real kubelet in a private mount
  namespace (host sysctls untouched), a fake CRI that resolves CDI devices, and `fakeplugin serve`;
  per other node (`kubelet: false`, --simulated-nodes): a Node kwok simulates (kwok runs once), and one
  `fakeplugin fleet` publishing and preparing for all of them (pods with claims run once prepared);
  with --view-endpoint, `fakeplugin view` (the fleet's web page; PORT 0: a free port; its URL printed);
  with --with karpenter, Karpenter launching simulated nodes of the inventory's instanceType entries for
  Pending pods and their claims (the cluster may start with no node; docs/karpenter.md).

binaries: missing ones are downloaded (etcd, the Kubernetes components, helm: official releases, checked
against their published SHA-256; FAKEPLUGIN_OFFLINE=1: never) and, with --build, the rest built
(docs/local-cluster.md, "Binaries: downloaded or built").

state dir (default ~/.cache/fakeplugin/cluster): admin.kubeconfig, cluster.json, logs/, nodes/<name>/
(CDI dir, fake CRI records containers/<ns>_<pod>_<container>.json), kubelet/<i>/ (kubelet roots).

Kubernetes versions: any 1.34.x to 1.38.x the Go module proxy serves (v1.34.4, v1.35.4, v1.36.3, v1.37.2,
v1.38.0-beta.0 checked), default v1.37.2; binaries cached per version. Per minor the etcd, helm, feature
gates and DeviceTaintRule API come from one table: fakeplugin/cluster/versions.py
(docs/kubernetes-versions.md).

examples:
  fakeplugin cluster build                                   download the official releases (verified),
                                                             build the rest (Go, module proxy)
  fakeplugin cluster up --inventory examples/seed-lab.yaml --simulated-nodes 3
  fakeplugin cluster up --inventory examples/seed-lab.yaml --kubernetes-version v1.37.2 --build
  fakeplugin cluster up --inventory examples/kueue/inventory.yaml --with kueue --build   real Kueue too
  fakeplugin cluster up --inventory examples/seed-lab.yaml --with prometheus   Prometheus on the plugins'
                                                             telemetry (prints its URL)
  fakeplugin cluster up --inventory examples/kueue/inventory.yaml --with kueue,prometheus --build
  fakeplugin cluster up --inventory examples/seed-lab.yaml --with prometheus,keda --build   and KEDA for
                                                             GPU-utilisation autoscaling (docs/hpa.md)
  fakeplugin cluster up --inventory examples/seed-lab.yaml --view-endpoint 127.0.0.1:0   the fleet view
  fakeplugin cluster up --inventory examples/karpenter/inventory.yaml --with karpenter --build   GPU nodes
                                                             launched and consolidated by Karpenter
  export KUBECONFIG=~/.cache/fakeplugin/cluster/admin.kubeconfig; kubectl get nodes,resourceslices
  fakeplugin cluster status
  fakeplugin cluster down
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cluster",
        help="a real local Kubernetes cluster (no Docker) for tests and demos",
        description="Run a real local Kubernetes cluster (1.34 to 1.38): control plane, real kubelets with "
        "a fake CRI for GPU nodes, kwok-simulated nodes for the rest, and fakeplugin as every node's "
        "kubelet plugins.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    up = actions.add_parser("up", help="start a cluster for an inventory")
    shared_flags(up, "--inventory", "--state-dir", "--kubernetes-version")
    flag(
        up,
        "--kubernetes-feature-gates",
        env="KUBERNETES_FEATURE_GATES",
        default="",
        metavar="LIST",
        help="Kubernetes feature gates for every component, over the version's defaults (1.34, 1.35: "
        "DRAPartitionableDevices, DRAExtendedResource, DRADeviceTaints, ResourceHealthStatus on; "
        "1.36 to 1.38: DRAListTypeAttributes, the rest is on by default there; 1.37, 1.38 also "
        "GenericWorkload, DRAWorkloadResourceClaims, TopologyAwareWorkloadScheduling: gangs, "
        "docs/rack-scale-jobs.md)",
    )
    flag(
        up,
        "--plugin-args",
        env="FAKEPLUGIN_PLUGIN_ARGS",
        default="",
        metavar="ARGS",
        help="extra flags for every node's kubelet plugin, e.g. '--feature-gates=DynamicMIG=true "
        "--device-health': all to `fakeplugin serve`, and to `fakeplugin fleet` those it takes too "
        "(--feature-gates, --fake-device-nodes, --driver-release, --consumable-shares, --device-status)",
    )
    flag(
        up,
        "--simulated-nodes",
        env="FAKEPLUGIN_SIMULATED_NODES",
        default=0,
        type=int,
        metavar="N",
        help="add N plain simulated (kwok) nodes worker-1..N",
    )
    flag(
        up,
        "--no-plugin",
        env="FAKEPLUGIN_NO_PLUGIN",
        action="store_true",
        help="run no kubelet plugin on any node: no `fakeplugin serve`, no `fakeplugin fleet` (nor the "
        "DeviceClasses)",
    )
    flag(
        up,
        "--fleet-shards",
        env="FAKEPLUGIN_FLEET_SHARDS",
        default=0,
        type=int,
        metavar="N",
        help="run N `fakeplugin fleet` processes for the simulated nodes, each its shard of them "
        "(default: 1, or 2 above 1000 simulated nodes)",
    )
    shared_flags(up, "--with", "--kueue-version", "--view-endpoint", "--binding-conditions")
    flag(
        up,
        "--binding-timeout",
        env="FAKEPLUGIN_BINDING_TIMEOUT",
        default=0,
        type=int,
        metavar="SECONDS",
        help="how long the scheduler waits for DRA binding conditions (DynamicResourcesArgs.bindingTimeout; "
        "default: its 600 s; Kubernetes 1.36 and later)",
    )
    flag(
        up,
        "--build",
        env="FAKEPLUGIN_BUILD",
        action="store_true",
        help="build missing binaries first (hack/build-k8s.sh)",
    )
    up.set_defaults(func=run_up)

    down = actions.add_parser("down", help="stop the cluster started in the state dir, remove its state")
    shared_flags(down, "--state-dir")
    flag(down, "--purge", env="FAKEPLUGIN_PURGE", action="store_true", help="also remove the logs")
    down.set_defaults(func=run_down)

    status = actions.add_parser(
        "status", help="processes, memory and nodes of the cluster; exit 1 unless running"
    )
    shared_flags(status, "--state-dir")
    status.set_defaults(func=run_status)

    build = actions.add_parser(
        "build",
        help="get the Kubernetes binaries, etcd, helm, kwok and the fake CRI: the official releases "
        "downloaded and verified where upstream publishes a checksum (not with FAKEPLUGIN_OFFLINE=1), the "
        "rest built",
    )
    shared_flags(build, "--kubernetes-version")
    flag(
        build,
        "--only",
        env="FAKEPLUGIN_BUILD_ONLY",
        default="",
        metavar="NAMES",
        help="comma-separated subset, e.g. kubelet,fakecri",
    )
    build.set_defaults(func=run_build)


def run_up(args: argparse.Namespace) -> int:
    from fakeplugin.cluster import Cluster, parse_feature_gates, versions

    if not args.inventory:
        raise ValueError("--inventory (or FAKEPLUGIN_INVENTORY) is required: the inventory file")
    k8s = versions.release(args.kubernetes_version)
    if args.binding_timeout < 0:
        raise ValueError("--binding-timeout: 0 (the scheduler's default, 600 s) or at least 1 second")
    with_kueue = kueue_request(args, build=args.build)
    with_prometheus = prometheus_request(args)
    with_keda = keda_request(args, build=args.build)
    with_karpenter = karpenter_request(args, build=args.build)
    cluster = Cluster.up(
        Path(args.inventory),
        Path(args.state_dir),
        kubernetes_version=args.kubernetes_version,
        feature_gates=parse_feature_gates(args.kubernetes_feature_gates, k8s.feature_gates),
        plugin=not args.no_plugin,
        simulated_nodes=args.simulated_nodes,
        build=args.build,
        plugin_args=shlex.split(args.plugin_args),
        kueue=with_kueue,
        prometheus=with_prometheus,
        keda=with_keda,
        karpenter=with_karpenter,
        fleet_shards=args.fleet_shards or None,
        view_endpoint=args.view_endpoint,
        binding_conditions=args.binding_conditions,
        binding_timeout=args.binding_timeout,
    )
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    if cluster.prometheus_url:
        print(f"# Prometheus: {cluster.prometheus_url}")  # a comment: `eval "$(fakeplugin cluster up ...)"`
    if cluster.view_url:
        print(f"# view: {cluster.view_url}")  # a comment too, for eval
    return 0


def kueue_request(args: argparse.Namespace, *, build: bool) -> KueueRequest | None:
    """What --with kueue asks for, checked (and built, with `build`) before anything starts."""
    from fakeplugin.cluster import kueue

    config = kueue.parse_with(args.with_addon)
    return None if config is None else kueue.request(config, args.kueue_version or None, build=build)


def keda_request(args: argparse.Namespace, *, build: bool) -> KedaRequest | None:
    """What --with keda asks for: KEDA's binaries (built first with `build`), before anything starts."""
    from fakeplugin.cluster import addons, keda

    wanted = addons.parse_with(args.with_addon).get(keda.NAME)
    if wanted:
        raise ValueError(f"--with {args.with_addon}: keda takes no argument (got {wanted!r})")
    return None if wanted is None else keda.request(build=build)


def karpenter_request(args: argparse.Namespace, *, build: bool) -> KarpenterRequest | None:
    """What --with karpenter[=NODEPOOLS] asks for: Karpenter's binary (built first with `build`) and the
    NodePools, checked before anything starts."""
    from fakeplugin.cluster import addons, karpenter

    nodepools = addons.parse_with(args.with_addon).get(karpenter.NAME)
    return None if nodepools is None else karpenter.request(nodepools, build=build)


def prometheus_request(args: argparse.Namespace) -> PrometheusRequest | None:
    """What --with prometheus asks for, checked before anything starts."""
    from fakeplugin.cluster import addons, prometheus

    rules = addons.parse_with(args.with_addon).get(prometheus.NAME)
    return None if rules is None else prometheus.request(rules)


def run_down(args: argparse.Namespace) -> int:
    from fakeplugin.cluster import Cluster

    Cluster(Path(args.state_dir)).down(purge=args.purge)
    return 0


def run_status(args: argparse.Namespace) -> int:
    from fakeplugin.cluster import Cluster

    cluster = Cluster(Path(args.state_dir))
    if not cluster.layout.cluster_file.exists():
        print(f"no cluster in {cluster.layout.root}")
        return 1
    rows = cluster.status()
    width = max(len(r.name) for r in rows)
    for r in rows:
        state = f"running  {r.rss_bytes / 2**20:7.1f} MiB" if r.running else "STOPPED"
        print(f"{r.name:<{width}}  pid {r.pid:<7} {state}  {r.log}")
    print(f"{'total RSS':<{width}}  {sum(r.rss_bytes for r in rows) / 2**20:.1f} MiB")
    print(f"kubeconfig: {cluster.kubeconfig}")
    if cluster.prometheus_url:
        print(f"prometheus: {cluster.prometheus_url}")
    if cluster.view_url:
        print(f"view: {cluster.view_url}")
    if not all(r.running for r in rows):
        return 1
    print(cluster.kubectl("get", "nodes", "-o", "wide").stdout, end="")
    return 0


def run_build(args: argparse.Namespace) -> int:
    from fakeplugin.cluster import binaries, versions

    versions.minor_of(args.kubernetes_version)  # a clear error before any Go runs
    return binaries.build([n for n in args.only.split(",") if n] or None, args.kubernetes_version)
