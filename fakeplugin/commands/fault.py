"""`fakeplugin fault`: inject or clear faults through the Kubernetes API (fakeplugin.dev annotations)."""

from __future__ import annotations

import argparse
from urllib.parse import quote

from fakeplugin.commands import shared_flags
from fakeplugin.faults import claimfaults as claim_faults
from fakeplugin.faults import devicefaults, fabricfaults
from fakeplugin.faults.daemonfaults import FAILED_ANNOTATION, LEFT_CLIQUE_ANNOTATION, NOT_READY_ANNOTATION

GPU_LOAD = "fakeplugin.dev/gpu-load"  # fakeplugin.telemetry.load.ANNOTATION (tests/test_faults.py)

DESCRIPTION = """\
Make a claim's Prepare or Unprepare fail, wait or fail a few times, make a node's devices fail as
NVIDIA's driver sees XID errors and lost GPUs, break a node's NVLink fabric and ComputeDomain daemon, or
load a pod's or claim's GPUs as telemetry shows them (--telemetry-endpoint): by setting fakeplugin.dev
annotations that every fakeplugin reads from the API server. Values are checked
here first; the plugin checks them again.
"""

EPILOG = """\
claim faults (annotations on the ResourceClaim; each option sets one, the others stay):
  fakeplugin fault claim team-a/my-gpu --prepare-error "GPU is busy"    every Prepare fails with it
  fakeplugin fault claim team-a/my-gpu --prepare-fail-count 2           the first 2 Prepares fail
  fakeplugin fault claim team-a/my-gpu --prepare-delay 1m30s            Prepare waits first (<= 10m)
  fakeplugin fault claim team-a/my-gpu --unprepare-error "stuck"        the pod stays Terminating
  fakeplugin fault claim team-a/my-gpu --gpu-load 90                    its GPUs 90 % busy (telemetry)
  fakeplugin fault claim team-a/my-gpu --gpu-load utilization=90,memory=40   framebuffer 40 % used
  fakeplugin fault claim team-a/my-gpu --clear                          remove every claim fault
  (claims made from a ResourceClaimTemplate: put the annotations in the template's spec.metadata,
   the controller copies them into every claim it makes)

pod load (the fakeplugin.dev/gpu-load annotation on the Pod: every GPU of every claim it uses, unless
the claim has its own):
  fakeplugin fault pod team-a/trainer-0 --gpu-load 75
  fakeplugin fault pod team-a/trainer-0 --clear

node faults (the fakeplugin.dev/device-faults annotation; sets exactly the faults given):
  fakeplugin fault node gpu-node-1 --xid gpu-1=79 --gpu-lost gpu-0
      gpu-1 gets taint gpu.nvidia.com/xid=79:NoSchedule, gpu-0 gpu.nvidia.com/gpu-lost:NoSchedule;
      both Unhealthy for the kubelet (serve --device-health)
  fakeplugin fault node gpu-node-1 --xid gpu-0=13     an XID the driver ignores: effect None, Healthy
  fakeplugin fault node gpu-node-1 --clear            heal every device of the node

ComputeDomain faults of a node (annotations on the Node; each option sets one, the others stay):
  fakeplugin fault compute-domain gb200-0 --fabric-state InProgress
      every GPU's NVLink fabric registration is In Progress (nvidia-smi -q, fabric.* queries); the
      compute-domain plugin refuses to start there (gate CrashOnNVLinkFabricErrors, on by default; off:
      the node has no clique); read when the plugin starts
  fakeplugin fault compute-domain gb200-0 --fabric-state gpu-2=Completed:ERROR_TIMEOUT
      only gpu-2: registered with an error status (NVML's ERROR_* names)
  fakeplugin fault compute-domain gb200-0 --daemon-not-ready "IMEX down"    its daemon stays NotReady
  fakeplugin fault compute-domain gb200-0 --left-clique "tray lost NVLink"
      its daemon removes its entry from the ComputeDomainClique (the node leaves the ComputeDomain's
      status.nodes) and enters again when the fault is cleared
  fakeplugin fault compute-domain gb200-0 --daemon-failed "IMEX session in use"
      its daemons failed: with the controller's --binding-conditions, channel claims allocated on it
      get ComputeDomainDaemonFailed=True and the scheduler gives up their binding
  fakeplugin fault compute-domain gb200-0 --clear                           remove all four

the local cluster (`fakeplugin cluster up` prints its KUBECONFIG):
  fakeplugin fault --kubeconfig ~/.cache/fakeplugin/cluster/admin.kubeconfig node big --xid gpu-3=48
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "fault",
        help="inject or clear faults on a claim or a node (fakeplugin.dev annotations)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--kubeconfig")
    targets = p.add_subparsers(dest="target", required=True, metavar="{claim,pod,node,compute-domain}")

    claim = targets.add_parser("claim", help="faults of one ResourceClaim's Prepare and Unprepare")
    claim.add_argument("claim", metavar="NS/NAME", help="the ResourceClaim, namespace/name")
    claim.add_argument("--prepare-error", metavar="MESSAGE", help="every Prepare fails with MESSAGE")
    claim.add_argument("--prepare-fail-count", metavar="N", help="the first N Prepare attempts fail")
    claim.add_argument(
        "--prepare-delay", metavar="DURATION", help="Prepare waits first (Go duration, <= 10m)"
    )
    claim.add_argument("--unprepare-error", metavar="MESSAGE", help="every Unprepare fails with MESSAGE")
    load_flag(claim)
    clear_flag(claim)
    claim.set_defaults(func=run_claim)

    pod = targets.add_parser("pod", help="the GPU load of one Pod (telemetry)")
    pod.add_argument("pod", metavar="NS/NAME", help="the Pod, namespace/name")
    load_flag(pod)
    clear_flag(pod)
    pod.set_defaults(func=run_pod)

    node = targets.add_parser("node", help="device faults of one node (taints, health)")
    node.add_argument("node", metavar="NODE", help="the node's name")
    node.add_argument(
        "--xid", action="append", default=[], metavar="DEVICE=N", help="an XID error on DEVICE (repeatable)"
    )
    node.add_argument(
        "--gpu-lost", action="append", default=[], metavar="DEVICE", help="DEVICE is lost (repeatable)"
    )
    clear_flag(node)
    node.set_defaults(func=run_node)

    cd = targets.add_parser(
        "compute-domain", help="NVLink fabric and ComputeDomain daemon faults of one node"
    )
    cd.add_argument("node", metavar="NODE", help="the node's name")
    cd.add_argument(
        "--fabric-state",
        metavar="STATE|DEVICE=STATE,...",
        help="NotStarted, InProgress or Completed:<NVML error> for every GPU, or per GPU (gpu-N=STATE)",
    )
    cd.add_argument("--daemon-not-ready", metavar="REASON", help="the node's daemon stays NotReady")
    cd.add_argument(
        "--left-clique", metavar="REASON", help="the node's daemon leaves its ComputeDomainClique"
    )
    cd.add_argument(
        "--daemon-failed",
        metavar="REASON",
        help="the node's daemons failed (binding failure condition, controller --binding-conditions)",
    )
    clear_flag(cd)
    cd.set_defaults(func=run_compute_domain)


def load_flag(target: argparse.ArgumentParser) -> None:
    target.add_argument(
        "--gpu-load",
        metavar="N|utilization=N[,memory=M]",
        # The annotation by name: fakeplugin.telemetry is loaded only where it is used (not by `serve`).
        help="the GPU load in percent, 0-100 (memory: framebuffer used, default: as utilization), as "
        "--telemetry-endpoint shows it (fakeplugin.dev/gpu-load; a claim's wins over its pods')",
    )


def checked_load(value: str, flag: str = "--gpu-load") -> str:
    """`value` when it is a load annotation value; LoadError (a ValueError) says why not."""
    from fakeplugin.telemetry.load import parse_load

    parse_load(value, flag)
    return value


def clear_flag(target: argparse.ArgumentParser) -> None:
    target.add_argument(
        "--clear", action="store_true", help="remove every fault this target's options set (see the examples)"
    )


def claim_annotations(args: argparse.Namespace) -> dict[str, str | None]:
    """The annotation patch the claim options ask for (None removes one); ValueError when it is bad."""
    values = {
        claim_faults.PREPARE_ERROR: args.prepare_error,
        claim_faults.PREPARE_FAIL_COUNT: args.prepare_fail_count,
        claim_faults.PREPARE_DELAY: args.prepare_delay,
        claim_faults.UNPREPARE_ERROR: args.unprepare_error,
        GPU_LOAD: args.gpu_load,
    }
    chosen = {key: value for key, value in values.items() if value is not None}
    if args.clear == bool(chosen):
        raise ValueError("fault claim: give --clear or at least one fault option (see --help)")
    if args.clear:
        return dict.fromkeys((*claim_faults.CLAIM_ANNOTATIONS, GPU_LOAD))
    claim_faults.claim_faults(chosen)  # ClaimFaultError (a ValueError) names the annotation and value
    if args.gpu_load is not None:
        checked_load(args.gpu_load)
    return dict(chosen)


def pod_annotations(args: argparse.Namespace) -> dict[str, str | None]:
    """The pod's load annotation patch (None removes it); ValueError when it is bad."""
    if args.clear == (args.gpu_load is not None):
        raise ValueError("fault pod: give --clear or --gpu-load (see --help)")
    return {GPU_LOAD: None if args.clear else checked_load(args.gpu_load)}


def node_annotation(args: argparse.Namespace) -> str | None:
    """The device-faults annotation the node options ask for (None removes it); ValueError when bad."""
    if args.clear == bool(args.xid or args.gpu_lost):
        raise ValueError("fault node: give --clear or at least one of --xid, --gpu-lost (see --help)")
    if args.clear:
        return None
    entries = []
    for xid in args.xid:
        device, sep, number = xid.partition("=")
        if not sep:
            raise ValueError(f"--xid {xid!r}: expected DEVICE=N, e.g. gpu-1=79")
        entries.append(f"{device}=xid:{number}")
    entries += [f"{device}=gpu-lost" for device in args.gpu_lost]
    value = ",".join(entries)
    devicefaults.parse_device_faults(value)  # DeviceFaultError (a ValueError) names the bad entry
    return value


COMPUTE_DOMAIN_ANNOTATIONS = (
    fabricfaults.ANNOTATION,
    NOT_READY_ANNOTATION,
    LEFT_CLIQUE_ANNOTATION,
    FAILED_ANNOTATION,
)


def compute_domain_annotations(args: argparse.Namespace) -> dict[str, str | None]:
    """The node annotation patch the compute-domain options ask for (None removes one); ValueError when
    it is bad."""
    values = {
        fabricfaults.ANNOTATION: args.fabric_state,
        NOT_READY_ANNOTATION: args.daemon_not_ready,
        LEFT_CLIQUE_ANNOTATION: args.left_clique,
        FAILED_ANNOTATION: args.daemon_failed,
    }
    chosen = {key: value for key, value in values.items() if value is not None}
    if args.clear == bool(chosen):
        raise ValueError("fault compute-domain: give --clear or at least one fault option (see --help)")
    if args.clear:
        return dict.fromkeys(COMPUTE_DOMAIN_ANNOTATIONS)
    for key in (NOT_READY_ANNOTATION, LEFT_CLIQUE_ANNOTATION, FAILED_ANNOTATION):
        if key in chosen and not chosen[key].strip():
            raise ValueError(f"annotation {key}: give a reason (an empty value counts as no fault)")
    # FabricFaultError (a ValueError) names the annotation and the bad entry.
    fabric = chosen.get(fabricfaults.ANNOTATION)
    if fabric is not None and not fabricfaults.parse_fabric_faults(fabric):
        raise ValueError(f"annotation {fabricfaults.ANNOTATION}: give a state, e.g. InProgress")
    return dict(chosen)


def run_claim(args: argparse.Namespace) -> int:
    namespace, sep, name = args.claim.partition("/")
    if not sep or not namespace or not name:
        raise ValueError(f"fault claim: {args.claim!r}: expected NAMESPACE/NAME")
    patch = claim_annotations(args)
    from fakeplugin.kube import RESOURCE_GROUP, RESOURCE_VERSION

    ns, n = quote(namespace, safe=""), quote(name, safe="")
    path = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/namespaces/{ns}/resourceclaims/{n}"
    _annotate(args, path, patch, f"resourceclaim {namespace}/{name}")
    return 0


def run_pod(args: argparse.Namespace) -> int:
    namespace, sep, name = args.pod.partition("/")
    if not sep or not namespace or not name:
        raise ValueError(f"fault pod: {args.pod!r}: expected NAMESPACE/NAME")
    patch = pod_annotations(args)
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    _annotate(args, path, patch, f"pod {namespace}/{name}")
    return 0


def run_node(args: argparse.Namespace) -> int:
    value = node_annotation(args)
    _annotate(
        args,
        f"/api/v1/nodes/{quote(args.node, safe='')}",
        {devicefaults.ANNOTATION: value},
        f"node {args.node}",
    )
    return 0


def run_compute_domain(args: argparse.Namespace) -> int:
    patch = compute_domain_annotations(args)
    _annotate(args, f"/api/v1/nodes/{quote(args.node, safe='')}", patch, f"node {args.node}")
    return 0


def _annotate(args: argparse.Namespace, path: str, patch: dict[str, str | None], what: str) -> None:
    from fakeplugin.kube import Kube, describe_api_error, new_api_client

    kube = Kube(new_api_client(args.kubeconfig or None, connections=1))
    try:
        kube.annotate(path, patch)
    except Exception as exc:  # the API's answer, or no answer: one readable line
        raise RuntimeError(f"annotating {what}: {describe_api_error(exc)}") from exc
    for key, value in patch.items():
        print(f"{what}: {key}={value!r}" if value is not None else f"{what}: {key} removed")
