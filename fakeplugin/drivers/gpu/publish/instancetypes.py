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

The GPU Operator's labels of the type's nodes (publish.nodelabels.launch_labels: all but GFD's
timestamp) are requirements of each offering, so that a NodePool or a pod selecting
`nvidia.com/gpu.product` or `nvidia.com/gpu.present` gets a node of a type that has them. Karpenter
v1.15.0 matches a NodeClaim's requirements (its NodePool's and its pods') against a type's own
requirements only on keys both have (pkg/scheduling/requirements.go `Intersects`,
pkg/controllers/provisioning/scheduling/nodeclaim.go `compatible`), which the kwok provider fixes to
the instance type, arch, OS, zone, capacity type and its own instance labels
(kwok/cloudprovider/helpers.go `newInstanceType`), and against each offering's requirements (`fits`:
`requirements.IsCompatible(of.Requirements, AllowUndefinedWellKnownLabels)`). The kwok provider makes
every offering requirement's key a well-known label (`newInstanceType` inserts it into
`v1.WellKnownLabels`), so a pod may select it before any node has it, and puts each single-valued `In`
one on the node it launches (kwok/cloudprovider/cloudprovider.go `addInstanceLabels`). A key some type
has and this one lacks is `DoesNotExist` in its offerings: without it a NodePool requiring
`gpu.product` would launch the cheapest CPU-only type and label it with the wanted product.
"""

from __future__ import annotations

from typing import Any

from fakeplugin import consumableshares
from fakeplugin.drivers.gpu.publish.node import node_slices
from fakeplugin.drivers.gpu.publish.nodelabels import launch_labels
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
    entries = [e for e in inventory.nodes if e.instance_type is not None]
    labels = [launch_labels(inventory, e) for e in entries]
    keys = sorted({k for type_labels in labels for k in type_labels})
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
            [_label_requirement(k, type_labels.get(k)) for k in keys],
        )
        for entry, type_labels in zip(entries, labels, strict=True)
    ]


def _label_requirement(key: str, value: str | None) -> dict[str, Any]:
    """An offering's requirement on a GPU Operator label: its value, or none for a type without it."""
    if value is None:
        return {"key": key, "operator": "DoesNotExist"}
    return {"key": key, "operator": "In", "values": [value]}


def _instance_type(
    entry: NodeEntry,
    templates: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    labels: list[dict[str, Any]],
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
                    *labels,
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
