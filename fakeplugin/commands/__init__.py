"""One module per CLI command; each exposes add_parser(subparsers).

Every flag can also be set through an environment variable (shown in --help), using the real
NVIDIA driver's names where one exists. A flag that several commands take is defined once, in SHARED:
the same name means the same thing, with the same help, variable and default, in every command
(docs/architecture.md, "Words").
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fakeplugin import DEFAULT_DRIVER_NAME, consumableshares, featuregates, releases
from fakeplugin.cluster import versions
from fakeplugin.cluster.binaries import DEFAULT_STATE_DIR
from fakeplugin.telemetry import exporters

if TYPE_CHECKING:
    from fakeplugin.runtime.emulation import Emulation


def flag(parser: argparse.ArgumentParser, *names: str, env: str, default: Any = None, **kw: Any) -> None:
    """Add a flag whose default comes from the environment variable `env`, else `default`."""
    value = os.environ.get(env, default)
    if kw.get("type") is int and isinstance(value, str):
        value = int(value)
    if kw.get("action") == "store_true":
        value = str(value).lower() in ("1", "true", "yes", "on") if isinstance(value, str) else bool(value)
    help_text = kw.pop("help", "")
    shown = f" (default: {default})" if default not in (None, "", False) else ""
    parser.add_argument(*names, default=value, help=f"{help_text}{shown} [env {env}]", **kw)


COMPUTE_DOMAINS = "compute-domains"
PLUGINS = ("gpus", COMPUTE_DOMAINS)  # NVIDIA's chart names its two kubelet plugin containers so
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN = 18  # cmd/compute-domain-controller/main.go: GB200/GB300's limit

# The flags several commands take: name → flag()'s keywords.
SHARED: dict[str, dict[str, Any]] = {
    "--inventory": dict(
        env="FAKEPLUGIN_INVENTORY",
        metavar="FILE",
        help="inventory YAML: the nodes, their labels and GPUs (e.g. examples/seed-lab.yaml; required)",
    ),
    "--kubeconfig": dict(
        env="KUBECONFIG",
        default="",
        metavar="FILE",
        help="kubeconfig of the cluster; empty: the in-cluster service account, else ~/.kube/config",
    ),
    "--state-dir": dict(
        env="FAKEPLUGIN_CLUSTER_DIR",
        default=str(DEFAULT_STATE_DIR),
        metavar="DIR",
        help="a local cluster's state dir (`fakeplugin cluster up`): its data, logs, pid records, "
        "admin.kubeconfig and nodes/<name>/",
    ),
    "--kubernetes-version": dict(
        env=versions.ENV,
        default=versions.DEFAULT_VERSION,
        metavar="vX.Y.Z",
        help="Kubernetes version, any 1.34.x to 1.38.x the Go module proxy serves: of the local cluster to "
        "build or run; for render, of the API server the slices are laid out for",
    ),
    "--with": dict(
        env="FAKEPLUGIN_WITH",
        dest="with_addon",
        default="",
        metavar="ADD-ONS",
        help="also run these, comma-separated: kueue[=CONFIG]: Kueue (sigs.k8s.io/kueue, built from its Go "
        "module) against the cluster, its webhooks reachable by the API server; CONFIG: a Kueue "
        "Configuration file (default: examples/kueue/config.yaml, DRA quota for gpu.nvidia.com and "
        "mig.nvidia.com; docs/kueue.md); prometheus[=RULES]: Debian's Prometheus (apt package prometheus) "
        "scraping every plugin's dcgm-exporter-compatible telemetry endpoint every 2 s; RULES: a rule file "
        "or folder (default: examples/prometheus/, an XID alert and per-namespace recording rules; "
        "docs/prometheus.md); keda: KEDA's operator and metrics API server (github.com/kedacore/keda, built "
        "from its Go module with --build), serving external.metrics.k8s.io for GPU-utilisation "
        "autoscaling (docs/hpa.md); karpenter[=NODEPOOLS]: Karpenter's kwok provider (sigs.k8s.io/karpenter, "
        "built from its Go module with --build and GOTOOLCHAIN=go1.27.3) launching simulated GPU nodes of "
        "the inventory's instanceType entries for pending pods and their claims; NODEPOOLS: its NodePools "
        "(default: examples/karpenter/nodepool.yaml; docs/karpenter.md)",
    ),
    "--kueue-version": dict(
        env="FAKEPLUGIN_KUEUE_VERSION",
        default="",
        metavar="v0.19.Z",
        help="the Kueue release --with kueue runs (default: fakeplugin/cluster/versions.py's)",
    ),
    "--view-endpoint": dict(
        env="FAKEPLUGIN_VIEW_ENDPOINT",
        default="",
        metavar="HOST:PORT",
        help="also serve the fleet view, a read-only live web page of the nodes and their GPUs "
        "(`fakeplugin view`, docs/fleet-view.md), at HOST:PORT (PORT 0: a free one); empty: off",
    ),
    "--view-group-label": dict(
        env="FAKEPLUGIN_VIEW_GROUP_LABEL",
        default="",
        metavar="LABEL",
        help="the fleet view groups the nodes by this node label's value (empty: by GPU model)",
    ),
    "--view-max-clients": dict(
        env="FAKEPLUGIN_VIEW_MAX_CLIENTS",
        default=32,
        type=int,
        metavar="N",
        help="the fleet view's connections served at once, open pages' event streams included; one more "
        "gets 503",
    ),
    "--node": dict(env="FAKEPLUGIN_NODE", metavar="NAME", help="only this node"),
    "--node-name": dict(env="NODE_NAME", default="", metavar="NAME", help="this node's name"),
    "--namespace": dict(
        env="NAMESPACE",
        default="default",
        metavar="NS",
        help="the driver's namespace (NVIDIA's chart: the release namespace), where the ComputeDomain "
        "controller keeps the daemons' objects and the ComputeDomainCliques",
    ),
    "--pod-name": dict(
        env="POD_NAME",
        default=socket.gethostname(),
        metavar="NAME",
        help="the name of the pod this runs in (the host name, in a pod)",
    ),
    "--pod-uid": dict(
        env="POD_UID",
        default="",
        metavar="UID",
        help="the UID of the pod this runs in (serve's socket names carry it, so old and new pods overlap "
        "in rolling updates)",
    ),
    "--max-nodes-per-imex-domain": dict(
        env="MAX_NODES_PER_IMEX_DOMAIN",
        default=DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
        type=int,
        metavar="N",
        help="the most nodes an IMEX domain (a ComputeDomainClique) holds",
    ),
    # serve --plugin compute-domains, fleet --compute-domains, compute-domain-controller: off, as every
    # NVIDIA release (docs/compute-domains.md, *Binding conditions*).
    "--binding-conditions": dict(
        env="BINDING_CONDITIONS",
        action="store_true",
        help="ComputeDomains with KEP-5007 binding conditions, beyond NVIDIA's releases (its PRs #855, "
        "#1359 closed): the plugins publish the channel device with bindingConditions "
        "ComputeDomainDaemonReady and bindingFailureConditions ComputeDomainDaemonFailed; the controller "
        "sets them in allocated claims' status.devices from the node's daemon",
    ),
    # serve (GPU plugin) and fleet: off, as every NVIDIA release (docs/compute-domains.md, *Claim device
    # status*).
    "--device-status": dict(
        env="DEVICE_STATUS",
        action="store_true",
        help="after a claim is prepared, report its GPU and MIG devices in the claim's status.devices "
        "(KEP-4817; beyond NVIDIA's releases): condition Ready True and data uuid, productName, pciBusID "
        "(MIG: parentUUID, profile); removed again at Unprepare. Needs update of resourceclaims/status and, "
        "from Kubernetes 1.36, associated-node:update of resourceclaims/driver for the driver name",
    ),
    "--nvml-library": dict(
        env="FAKEPLUGIN_NVML_LIBRARY",
        default="",
        metavar="FILE",
        help="GPU plugin (serve --plugin gpus; the fleet: each simulated node's): the mock NVML library, a "
        "libnvidia-ml.so.1 built from fakeplugin's C source "
        "(fakeplugin/nvml) by fakeplugin.nvml.build.build(CACHE_DIR) with the system's C compiler; "
        "`fakeplugin cluster up` builds and passes it; the image ships it as "
        "/opt/fakeplugin/nvml/libnvidia-ml.so.1, which the chart passes. The plugin installs a copy at "
        "<plugins dir>/<driver>/lib/ when it starts, a path its node shares, and each claim's CDI spec then "
        "mounts that copy where a container finds libnvidia-ml.so.1 by name (/usr/lib/<arch>-linux-gnu, "
        "/usr/lib64) and, per device, "
        "the NVML description Prepare writes into <plugins dir>/<driver>/nvml/, so NVML in the container "
        "(pynvml, Ray, go-nvml) lists exactly the GPUs or MIG devices of its requests (docs/emulation.md, "
        "NVML in the container); empty: containers get no NVML",
    ),
    "--gpu-operator-labels": dict(
        env="GPU_OPERATOR_LABELS",
        action="store_true",
        help="keep the GPU Operator's labels of each served node's inventory entry (its gpuOperator mode: "
        "GPU Feature Discovery's nvidia.com/gpu.product, ...) on its Node, current when the inventory "
        "changes, removed at stop; only the labels it gave are changed (serve: gpus only); needs patch "
        "on nodes",
    ),
    "--plugin": dict(
        env="FAKEPLUGIN_PLUGIN",
        default="gpus",
        choices=PLUGINS,
        help="which NVIDIA kubelet plugin: gpus (gpu.nvidia.com) or compute-domains "
        "(compute-domain.nvidia.com: IMEX channels and daemons, docs/compute-domains.md)",
    ),
    "--driver-name": dict(
        env="DRIVER_NAME",
        default=DEFAULT_DRIVER_NAME,
        metavar="NAME",
        help="the GPU DRA driver's name; the ComputeDomain driver's follows it (compute-domain.<NAME "
        "without gpu.>), and so do the DeviceClass names; change it to run beside NVIDIA's real driver",
    ),
    "--driver-release": dict(
        env="DRIVER_RELEASE",
        default="",
        metavar="RELEASE",
        help="NVIDIA driver release to emulate (its gates, slice names, opaque config rules); empty: the "
        f"inventory's driverRelease, read once at start, else the default ({releases.DEFAULT_RELEASE}, the "
        f"newest); known: {releases.known()}",
    ),
    "--feature-gates": dict(
        env="FEATURE_GATES",
        default="",
        metavar="LIST",
        help="NVIDIA driver feature gates (the driver's own, not Kubernetes'), e.g. "
        "TimeSlicingSettings=true; known (by release): " + ", ".join(featuregates.KNOWN),
    ),
    # main 95932046 cmd/gpu-kubelet-plugin/main.go
    "--consumable-shares": dict(
        env="CONSUMABLE_SHARES",
        default=consumableshares.DISABLED,
        metavar="MODE",
        help="devices several claims can share, each consuming part (releases 0.5.0-dev and 0.5.0 with "
        "their gate ConsumableShares): disabled, memory, unlimited or a number of shares "
        "(docs/consumable-shares.md)",
    ),
    "--telemetry-endpoint": dict(
        env="FAKEPLUGIN_TELEMETRY_ENDPOINT",
        default="",
        metavar="HOST:PORT",
        help="serve GPU telemetry as NVIDIA's dcgm-exporter does on http://HOST:PORT/metrics (its metric "
        "names, labels, DRA attribution; values follow the fakeplugin.dev/gpu-load annotation of a pod or "
        "claim: docs/telemetry.md), e.g. 127.0.0.1:9400 (dcgm-exporter's port); :PORT is loopback, "
        "0.0.0.0:PORT every address; empty: off",
    ),
    "--telemetry-counters": dict(
        env="FAKEPLUGIN_TELEMETRY_COUNTERS",
        default="",
        metavar="FILE",
        help="a dcgm-exporter counters CSV (`DCGM FIELD, Prometheus type, help` lines, as its -f file) "
        "naming the metrics --telemetry-endpoint serves; empty: dcgm-exporter 4.5.3-4.8.2's "
        "default-counters.csv (shipped); an unknown field is an error naming its line",
    ),
    "--telemetry-exporter-release": dict(
        env="FAKEPLUGIN_TELEMETRY_EXPORTER_RELEASE",
        default=exporters.DEFAULT_EXPORTER_RELEASE,
        metavar="RELEASE",
        help="the NVIDIA dcgm-exporter release --telemetry-endpoint renders as (its label names, DRA "
        f"attribution, fields: docs/telemetry.md); known: {exporters.known_exporters()}",
    ),
    # dcgm-exporter's own flag and variable (pkg/cmd/app.go CLIKubernetesEnablePodUID).
    "--kubernetes-enable-pod-uid": dict(
        env="DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID",
        action="store_true",
        help="--telemetry-endpoint adds pod_uid to DRA-attributed series, as dcgm-exporter's flag does "
        "from release 4.6.1-4.8.4 on (earlier releases set it on device-plugin series only: none here)",
    ),
    "--fake-device-nodes": dict(
        env="FAKE_DEVICE_NODES",
        action="store_true",
        help="CDI specs also inject /dev/nvidia<minor>, /dev/nvidiactl and /dev/nvidia-uvm* as character "
        "devices (the runtime creates them; nothing on the host is needed)",
    ),
}


def telemetry_flags(parser: argparse.ArgumentParser) -> None:
    """--telemetry-endpoint, --telemetry-counters, --telemetry-exporter-release and
    --kubernetes-enable-pod-uid (fakeplugin.telemetry)."""
    shared_flags(
        parser,
        "--telemetry-endpoint",
        "--telemetry-counters",
        "--telemetry-exporter-release",
        "--kubernetes-enable-pod-uid",
    )


def shared_flags(parser: argparse.ArgumentParser, *names: str) -> None:
    """Add the SHARED flags `names`."""
    for name in names:
        flag(parser, name, **SHARED[name])


def emulation_flags(parser: argparse.ArgumentParser, *, device_nodes: bool) -> None:
    """What is emulated (runtime.emulation): --driver-name, --driver-release, --feature-gates (NVIDIA's,
    under the real driver's name), --consumable-shares; with `device_nodes`, --fake-device-nodes."""
    shared_flags(parser, "--driver-name", "--driver-release", "--feature-gates", "--consumable-shares")
    if device_nodes:
        shared_flags(parser, "--fake-device-nodes")


def emulated(args: argparse.Namespace, inventory_release: str, driver_name: str) -> Emulation:
    """The Emulation of the emulation flags for the driver `driver_name`; `inventory_release`: the
    inventory's driverRelease, used when --driver-release is empty. ValueError names the flag at fault."""
    from fakeplugin.runtime.emulation import emulation

    return emulation(
        release=args.driver_release or inventory_release,
        driver_name=driver_name,
        feature_gates=args.feature_gates,
        consumable_shares=args.consumable_shares,
        device_nodes=getattr(args, "fake_device_nodes", False),
    )


def compute_domain_driver_name(driver_name: str) -> str:
    """The ComputeDomain driver's name beside the GPU driver `driver_name`: compute-domain.<the rest>, the
    rule of the DeviceClass names (mig.<the rest>: drivers.gpu.publish.deviceclasses), so the default
    gpu.nvidia.com gives NVIDIA's compute-domain.nvidia.com."""
    return f"compute-domain.{driver_name.removeprefix('gpu.')}"


def plugin_driver_name(args: argparse.Namespace) -> str:
    """The driver name of the kubelet plugin --plugin picks: --driver-name's GPU driver, or its
    ComputeDomain driver."""
    if args.plugin == COMPUTE_DOMAINS:
        return compute_domain_driver_name(args.driver_name)
    return str(args.driver_name)


# Command → its module (which defines add_parser(subparsers)), in the order `fakeplugin --help` lists them.
MODULES: dict[str, str] = {
    "demo": "demo",
    "serve": "serve",
    "fleet": "fleet",
    "compute-domain-controller": "computedomaincontroller",
    "compute-domain-daemon": "computedomaindaemon",
    "render": "render",
    "validate": "validate",
    "profiles": "profiles",
    "cluster": "cluster",
    "calls": "calls",
    "fault": "fault",
    "view": "view",
}


def parser_adders(argv: Sequence[str]) -> list[Callable[[argparse._SubParsersAction], None]]:
    """The add_parser of the command `argv` names (its first word that is a command), alone: `serve` does
    not import the other commands' modules (their time and memory at a plugin's start, docs/benchmarks.md).
    Every command's when `argv` names none (`--help`, a typo: the parser lists them all)."""
    import importlib

    command = next((word for word in argv if word in MODULES), None)
    modules = [MODULES[command]] if command else MODULES.values()
    return [importlib.import_module(f"fakeplugin.commands.{m}").add_parser for m in modules]
