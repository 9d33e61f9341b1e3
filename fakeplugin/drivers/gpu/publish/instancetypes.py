"""The inventory's `instanceType` entries → the instance types of Karpenter's kwok provider, each with the
ResourceSlice templates of its devices (pure).

Karpenter (sigs.k8s.io/karpenter v1.15.0) simulates a pending pod's DRA allocation on a node it has not
launched yet from its instance type's `DynamicResources.ResourceSliceTemplates`
(pkg/cloudprovider/dynamicresources.go): per slice a driver, a pool and devices with attributes,
capacity and counters, no node. hack/karpenter/main.go reads them from the file written here: the kwok
provider's own instance-type fields (kwok/cloudprovider/helpers.go `InstanceTypeOptions`) plus
`resourceSlices` and `attributeBindings`.

The templates are the slices the fleet publishes for a node of that type (publish.node.node_slices, the
same release, gates and API server layout), less what only a running node knows: an attribute is
runtime when two nodes of the type publish different values for it (UUIDs, PCI addresses, PCIe roots).
Devices that share such a value on one node (a MIG device and its parent GPU's UUID) become an
attribute binding, so a claim's matchAttribute constraint on it can still be simulated.
"""

from __future__ import annotations

from typing import Any

from fakeplugin import consumableshares
from fakeplugin.drivers.gpu.publish.node import node_slices
from fakeplugin.drivers.gpu.publish.slices import SPLIT_COUNTERS_SINCE
from fakeplugin.inventory import INSTANCE_TYPE_LABEL, Inventory, NodeEntry
from fakeplugin.releases import DriverRelease

# Karpenter's well-known labels its kwok provider offers on (pkg/apis/v1 CapacityTypeLabelKey; the zone).
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
ON_DEMAND = "on-demand"
PODS = "110"  # the kwok provider's default, as every kubelet's
# Two node names no inventory entry can name (upper case is not a node name): what differs between their
# slices is runtime.
_SAMPLES = ("Karpenter-Template-A", "Karpenter-Template-B")


def instance_types(
    inventory: Inventory,
    *,
    driver: str,
    release: DriverRelease,
    dynamic_mig: bool = False,
    passthrough: bool = False,
    server_version: tuple[int, int] = SPLIT_COUNTERS_SINCE,
    consumable_shares: str = consumableshares.DISABLED,
) -> list[dict[str, Any]]:
    """Every instanceType entry of `inventory` as the kwok provider's instance type, with its templates;
    the same emulation arguments as the fleet that serves the nodes (publish.node.node_slices)."""
    return [
        _instance_type(
            entry,
            _templates(
                entry,
                inventory,
                driver,
                release,
                dynamic_mig,
                passthrough,
                server_version,
                consumable_shares,
            ),
        )
        for entry in inventory.nodes
        if entry.instance_type is not None
    ]


def _instance_type(
    entry: NodeEntry, templates: tuple[list[dict[str, Any]], list[dict[str, Any]]]
) -> dict[str, Any]:
    t = entry.instance_type
    assert t is not None  # instance_types passes only instanceType entries
    slices, bindings = templates
    return {
        "name": t.name,
        "offerings": [
            {
                "Price": t.price,
                "Available": True,
                "Requirements": [
                    {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [ON_DEMAND]},
                    {"key": ZONE_LABEL, "operator": "In", "values": [zone]},
                ],
            }
            for zone in t.zones
        ],
        "architecture": t.architecture,
        "operatingSystems": ["linux"],
        "resources": {"cpu": str(entry.cpus), "memory": f"{t.memory_bytes >> 20}Mi", "pods": PODS},
        "resourceSlices": slices,
        "attributeBindings": bindings,
    }


def _templates(
    entry: NodeEntry,
    inventory: Inventory,
    driver: str,
    release: DriverRelease,
    dynamic_mig: bool,
    passthrough: bool,
    server_version: tuple[int, int],
    consumable_shares: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The type's slice specs (pool named after the type) and its attribute bindings."""
    assert entry.instance_type is not None
    pool = entry.instance_type.name
    a, b = (
        node_slices(
            inventory,
            name,
            node_uid="",
            driver=driver,
            labels={INSTANCE_TYPE_LABEL: pool},
            dynamic_mig=dynamic_mig,
            passthrough=passthrough,
            release=release,
            server_version=server_version,
            consumable_shares=consumable_shares,
        )
        for name in _SAMPLES
    )
    other = {d["name"]: d.get("attributes", {}) for s in b for d in s["spec"].get("devices", [])}
    shared: dict[tuple[str, str], list[str]] = {}  # (attribute, value on node A) → devices
    specs = []
    for s in a:
        spec = {k: v for k, v in s["spec"].items() if k != "nodeName"}
        spec["pool"] = {**spec["pool"], "name": pool}
        devices = []
        for device in spec.get("devices", []):
            attributes = dict(device.get("attributes", {}))
            for key, value in device.get("attributes", {}).items():
                if other[device["name"]].get(key) != value:
                    del attributes[key]
                    shared.setdefault((_qualified(key, driver), repr(value)), []).append(device["name"])
            devices.append({**device, "attributes": attributes})
        if "devices" in spec:
            spec["devices"] = devices
        specs.append(spec)
    bindings = [
        {"attribute": attribute, "devices": [{"driver": driver, "pool": pool, "device": d} for d in names]}
        for (attribute, _), names in sorted(shared.items())
        if len(names) >= 2
    ]
    return specs, bindings


def _qualified(attribute: str, driver: str) -> str:
    """An attribute's fully qualified name: unqualified ones are in the driver's domain (resource.k8s.io)."""
    return attribute if "/" in attribute else f"{driver}/{attribute}"
