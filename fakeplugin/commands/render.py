"""`fakeplugin render`: the DeviceClasses and ResourceSlices an inventory produces, without a cluster."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from fakeplugin import releases
from fakeplugin.cluster import versions
from fakeplugin.commands import (
    COMPUTE_DOMAINS,
    emulated,
    emulation_flags,
    flag,
    plugin_driver_name,
    shared_flags,
)
from fakeplugin.inventory import load_inventory
from fakeplugin.render import render_compute_domains, render_documents, to_yaml
from fakeplugin.resourceslices import check_driver_name

DESCRIPTION = """\
Print, as multi-document YAML, what the plugin would create in the API server for an inventory:
first the DeviceClasses (as NVIDIA's chart installs them), then the ResourceSlices of every node
named in the inventory, or of one node with --node. No cluster is needed; the output is exactly the
objects the API server would receive (slice names are picked by the server from generateName).

Nodes matched by a selector have no name in the inventory: render one with --node and its
--node-labels. Without --node-uid, the Node ownerReference carries a stand-in UID derived from the
node name (a real API server has the Node's own UID). --feature-gates takes the plugin's gates:
DynamicMIG=true shows MIG-capable GPUs as partitionable devices with shared counters.

--driver-release picks the NVIDIA driver release to emulate (overriding the inventory's driverRelease;
default the newest, 0.5.0; the reference lab's examples/seed-lab.yaml says 25.12): its feature gates,
attributes, DeviceClasses and slice names (25.12 names slices <node>-<driver>-..., 0.4.1 and later
<index>-<driver>-<node>-...). docs/driver-releases.md lists the differences.

--kubernetes-version lays the slices out for that API server (DynamicMIG: before 1.35 each GPU's counter
set shares its slice with the GPU's devices).

--karpenter-instance-types prints, as JSON, the instance types of the inventory's `instanceType` entries
for Karpenter's kwok provider (INSTANCE_TYPES_FILE_PATH), each with the ResourceSlice templates of its
devices as the fleet publishes them with the same flags (docs/karpenter.md).

--plugin compute-domains prints what the ComputeDomain driver's plugin publishes instead
(compute-domain.nvidia.com, or compute-domain.<rest> for --driver-name gpu.<rest>): its two DeviceClasses
and, per node with GPUs, one slice with devices channel-0 and daemon-0.
"""

EPILOG = """\
examples:
  fakeplugin render --inventory examples/seed-lab.yaml
  fakeplugin render --inventory examples/seed-lab.yaml --node capi-dralabs-md-gpua5000-jw4mx-d64jz
  fakeplugin render --inventory inv.yaml --node worker-7 --node-labels gpu=t4,zone=a
  fakeplugin render --inventory inv.yaml --driver-name gpu.fake.nvidia.com | kubectl apply -f -
  fakeplugin render --inventory examples/mig.yaml --node h200-dynamic --feature-gates DynamicMIG=true
  fakeplugin render --inventory examples/seed-lab.yaml --driver-release 0.4.1
  fakeplugin render --inventory examples/nvl72.yaml --plugin compute-domains --node gb200-rack-a-0
  fakeplugin render --inventory examples/karpenter/inventory.yaml --karpenter-instance-types > types.json
"""


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "render",
        help="print the DeviceClasses and ResourceSlices of an inventory (no cluster)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    shared_flags(p, "--inventory", "--node")
    flag(
        p,
        "--node-labels",
        env="NODE_LABELS",
        metavar="K=V,...",
        help="labels of --node, to pick its entry by selector when it is not named in the inventory",
    )
    flag(p, "--node-uid", env="NODE_UID", metavar="UID", help="UID of --node for the ownerReference")
    shared_flags(p, "--plugin")
    p.add_argument(
        "--karpenter-instance-types",
        action="store_true",
        help="print the instanceType entries as Karpenter's kwok instance types with ResourceSlice "
        "templates (JSON), instead of the YAML objects",
    )
    emulation_flags(p, device_nodes=False)
    shared_flags(p, "--kubernetes-version")
    p.set_defaults(func=run, parser=p)


def run(args: argparse.Namespace) -> int:
    if not args.inventory:
        args.parser.error("--inventory (or FAKEPLUGIN_INVENTORY) is required")
    if args.node_uid and not args.node:
        args.parser.error("--node-uid needs --node")
    inv = load_inventory(args.inventory)
    try:
        release = releases.get(args.driver_release or inv.driver_release)
    except ValueError as exc:
        args.parser.error(f"--driver-release: {exc}")
    driver_name = plugin_driver_name(args)
    try:
        labels = parse_labels(args.node_labels or "")
        check_driver_name(driver_name)
        emulation = emulated(args, release.name, driver_name)
        server_version = versions.server_version(args.kubernetes_version)
    except ValueError as exc:
        args.parser.error(str(exc))
    if args.karpenter_instance_types:
        from fakeplugin.drivers.gpu import instance_types

        types = instance_types(
            inv,
            driver=driver_name,
            release=emulation.release,
            dynamic_mig=emulation.dynamic_mig,
            passthrough=emulation.passthrough,
            server_version=server_version,
            consumable_shares=emulation.consumable_shares,
        )
        if not types:
            args.parser.error(f"{inv.source}: no instanceType entries (docs/karpenter.md)")
        json.dump(types, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.node is None:
        for entry in inv.nodes:
            if entry.match_labels is not None:
                print(
                    f"fakeplugin render: {entry.path} selects nodes by label {entry.match_labels}; "
                    "render one with --node NAME --node-labels K=V",
                    file=sys.stderr,
                )
    if args.plugin == COMPUTE_DOMAINS:
        cd_docs = render_compute_domains(
            inv,
            driver=driver_name,
            node=args.node,
            labels=labels,
            node_uid=args.node_uid,
            release=release,
        )
        sys.stdout.write(to_yaml(cd_docs))
        return 0
    docs = render_documents(
        inv,
        driver=driver_name,
        node=args.node,
        labels=labels,
        node_uid=args.node_uid,
        dynamic_mig=emulation.dynamic_mig,
        passthrough=emulation.passthrough,
        release=emulation.release,
        server_version=server_version,
        consumable_shares=emulation.consumable_shares,
    )
    sys.stdout.write(to_yaml(docs))
    return 0


def parse_labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` → {k: v, k2: v2}; ValueError naming the bad item."""
    labels: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f'invalid label "{item}": expected KEY=VALUE')
        labels[key] = value
    return labels
