"""`fakeplugin compute-domain-controller`: NVIDIA's compute-domain-controller for ComputeDomains."""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading
import uuid

from fakeplugin import __version__, featuregates, releases
from fakeplugin.commands import flag, shared_flags

log = logging.getLogger(__name__)

# NVIDIA's chart names the Lease `<chart name>-controller`, in the driver's namespace
# (templates/controller.yaml; the binary's own default is nvidia-compute-domain-controller in default).
DEFAULT_LEASE_NAME = "dra-driver-nvidia-gpu-controller"
IMEX_MODES = ("driverManaged", "hostManaged")

DESCRIPTION = """\
Run NVIDIA's ComputeDomain controller (compute-domain-controller of the compute-domain.nvidia.com DRA
driver) against a cluster with the ComputeDomain CRDs installed. For every ComputeDomain, in any namespace:

  - the finalizer resource.nvidia.com/computeDomain;
  - in the driver's namespace (--namespace): the daemon ResourceClaimTemplate computedomain-daemon-<uid>
    and the DaemonSet computedomain-daemon-<uid>, whose pods (our image, `fakeplugin compute-domain-daemon`)
    run on the nodes labelled resource.nvidia.com/computeDomain=<uid>;
  - in the ComputeDomain's namespace: the workload ResourceClaimTemplate named by
    spec.channel.resourceClaimTemplate.name (request `channel`, class
    compute-domain-default-channel.nvidia.com, opaque ComputeDomainChannelConfig);
  - every 2 s, status.nodes from its ComputeDomainCliques (and fabric-less daemon pods), and status.status:
    NotReady while fewer nodes than spec.numNodes are listed or any is NotReady, else Ready.

Deleting a ComputeDomain removes its templates, its DaemonSet and the node labels, then the finalizers, in
NVIDIA's order. Flags and environment variables are NVIDIA's (docs/compute-domains.md, "The controller").
"""

EPILOG = """\
examples:
  fakeplugin compute-domain-controller --print-crds | kubectl apply -f -
                                            install the CRDs (NVIDIA's schema) first
  fakeplugin compute-domain-controller --kubeconfig admin.kubeconfig --namespace dra-driver
                                            one controller, the daemons' objects in namespace dra-driver
  fakeplugin compute-domain-controller --leader-election-enabled
                                            in-cluster, replicated: only the holder of the Lease
                                            dra-driver-nvidia-gpu-controller works
  fakeplugin compute-domain-controller --driver-release 0.5.0-dev \\
      --feature-gates HostManagedIMEXDaemon=true --imex-mode hostManaged
                                            host-managed IMEX: only the workload template, always Ready
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compute-domain-controller",
        help="NVIDIA's ComputeDomain controller (templates, daemon DaemonSet, global status)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--print-crds", action="store_true", help="print the two CRDs as YAML and exit")
    shared_flags(p, "--kubeconfig", "--namespace", "--pod-name")
    flag(
        p,
        "--image-name",
        env="IMAGE_NAME",
        default=f"fakeplugin:{__version__}",
        metavar="IMAGE",
        help="the image of the daemon pods",
    )
    shared_flags(p, "--max-nodes-per-imex-domain")
    flag(
        p,
        "--log-verbosity-cd-daemon",
        env="LOG_VERBOSITY_CD_DAEMON",
        default=0,
        type=int,
        metavar="N",
        help="the daemon pods' log verbosity",
    )
    flag(
        p,
        "--cd-daemon-image-pull-secret-names",
        env="CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
        default="",
        metavar="LIST",
        help="comma-separated imagePullSecrets of the daemon pods",
    )
    shared_flags(p, "--driver-release", "--feature-gates")
    flag(
        p,
        "--imex-mode",
        env="IMEX_MODE",
        default="driverManaged",
        choices=IMEX_MODES,
        help="who runs nvidia-imex (releases 0.5.0-dev, 0.5.0; hostManaged needs gate HostManagedIMEXDaemon)",
    )
    shared_flags(p, "--binding-conditions")
    flag(
        p,
        "--leader-election-enabled",
        env="LEADER_ELECTION_ENABLED",
        action="store_true",
        help="work only while holding the Lease (replicated controllers)",
    )
    flag(
        p,
        "--leader-election-lease-lock-name",
        env="LEADER_ELECTION_LEASE_LOCK_NAME",
        default=DEFAULT_LEASE_NAME,
        metavar="NAME",
        help="the Lease",
    )
    flag(
        p,
        "--leader-election-lease-lock-namespace",
        env="LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
        default="",
        metavar="NS",
        help="the Lease's namespace; empty: --namespace",
    )
    for name, env, default, what in (
        ("lease-duration", "LEADER_ELECTION_LEASE_DURATION", "15s", "how long a Lease holds without renewal"),
        ("renew-deadline", "LEADER_ELECTION_RENEW_DEADLINE", "10s", "how long the leader retries renewing"),
        ("retry-period", "LEADER_ELECTION_RETRY_PERIOD", "2s", "the wait between tries"),
    ):
        flag(
            p,
            f"--leader-election-{name}",
            env=env,
            default=default,
            type=seconds,
            metavar="DURATION",
            help=what,
        )
    p.set_defaults(func=run)


def seconds(text: str | float) -> float:
    """A Go duration as NVIDIA's flags take them (`15s`, `1m30s`, `500ms`), or a number of seconds."""
    if isinstance(text, float | int):
        return float(text)
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        try:
            return float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 15s)") from None
    return sum(float(n) * units[u] for n, u in parts)


def run(args: argparse.Namespace) -> int:
    if args.print_crds:
        import yaml

        from fakeplugin.apis import computedomain as api

        print(yaml.safe_dump_all(api.crds(), sort_keys=False), end="")
        return 0
    from fakeplugin.drivers.computedomain.controller.lease import LeaderElector, LeaseConfig
    from fakeplugin.drivers.computedomain.controller.loop import Controller
    from fakeplugin.drivers.computedomain.controller.objects import DaemonSettings
    from fakeplugin.drivers.computedomain.controller.reconcile import Mode
    from fakeplugin.kube import Kube, new_api_client

    release = releases.get(args.driver_release or None)
    gates = featuregates.parse(args.feature_gates, release)
    host_managed = check_imex_mode(args.imex_mode, gates, release)
    if host_managed and args.binding_conditions:  # no daemons whose readiness the conditions could say
        raise ValueError("--binding-conditions needs driver-managed daemons, not --imex-mode hostManaged")
    if host_managed:  # main.go: no daemons, so these gates mean nothing
        gates.update(IMEXDaemonsWithDNSNames=False, ComputeDomainCliques=False)
    mode = Mode(
        daemon=DaemonSettings(
            namespace=args.namespace,
            image=args.image_name,
            max_nodes_per_imex_domain=args.max_nodes_per_imex_domain,
            feature_gates=gates,
            log_verbosity=args.log_verbosity_cd_daemon,
            image_pull_secrets=tuple(args.cd_daemon_image_pull_secret_names.replace(",", " ").split()),
        ),
        host_managed=host_managed,
        cliques_gate=gates["ComputeDomainCliques"],
        binding_conditions=args.binding_conditions,
    )
    kube = Kube(new_api_client(args.kubeconfig or None))
    controller = Controller(kube, mode)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("compute-domain-controller (release %s), driver namespace %s", release.name, args.namespace)
    if not args.leader_election_enabled:
        log.info("Leader election disabled, starting controller directly")
        controller.run(stop)
        return 0
    lease = LeaseConfig(
        namespace=args.leader_election_lease_lock_namespace or args.namespace,
        name=args.leader_election_lease_lock_name,
        identity=f"{args.pod_name}-{uuid.uuid4()}",  # main.go: a restarted pod is a new candidate
        lease_duration=args.leader_election_lease_duration,
        renew_deadline=args.leader_election_renew_deadline,
        retry_period=args.leader_election_retry_period,
    )
    LeaderElector(kube, lease).run(lambda leading: controller.run(_either(stop, leading)), stop)
    return 0


def check_imex_mode(imex_mode: str, gates: dict[str, bool], release: releases.DriverRelease) -> bool:
    """Whether IMEX is host-managed; pkg/imex `Validate`'s error when the gate is off."""
    if imex_mode != "hostManaged":
        return False
    if not gates.get("HostManagedIMEXDaemon", False):
        suffix = (
            "" if "HostManagedIMEXDaemon" in release.feature_gates else f" (not in release {release.name})"
        )
        raise ValueError(
            f'imex configuration validation failed: imex.mode="hostManaged" requires the '
            f"HostManagedIMEXDaemon feature gate to be enabled{suffix}"
        )
    return True


def _either(a: threading.Event, b: threading.Event) -> threading.Event:
    """An event set as soon as `a` or `b` is (the controller stops on shutdown or lost leadership)."""
    both = threading.Event()

    def watch() -> None:
        while not both.is_set():
            if a.wait(0.2) or b.is_set():
                both.set()

    threading.Thread(target=watch, name="cd-stop", daemon=True).start()
    return both
