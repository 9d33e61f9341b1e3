"""The inventory: one YAML file describing the GPUs of every node of the fleet.

The reference lab (examples/seed-lab.yaml); without `driverRelease` it would emulate the default, 0.5.0::

    driverVersion: "580.126.20"
    cudaDriverVersion: "13.0"
    driverRelease: "25.12"
    nodes:
    - name: capi-dralabs-md-gput10-gzl84-f2m2d
      gpus:
      - profile: t10
        count: 2
    - name: capi-dralabs-md-gpua5000-jw4mx-d64jz
      gpus:
      - profile: rtx-a5000
        ecc: true

Fields:

| field | type | default | meaning |
| --- | --- | --- | --- |
| `driverVersion` | `"N.N"`, `"N.N.N"` | required | driver version as NVML prints it, `580.95.05` [1] |
| `cudaDriverVersion` | `"N.N"` | required | CUDA driver version, `13.0` (published as `13.0.0`) |
| `driverRelease` | string | `"0.5.0"` | NVIDIA release emulated: `25.12`, `0.4.1`, `0.5.0-dev`, `0.5.0` [7] |
| `nodes[]` | list | required | at least one entry: a node by name, many by prefix or by selector, a type |
| `nodes[].name` | string | one of the four | exact node name (DNS subdomain) |
| `nodes[].namePrefix` | string | one of the four | nodes `<namePrefix>0`...`<namePrefix><replicas-1>` [6] |
| `nodes[].replicas` | integer >= 1 | 1 | how many nodes a `namePrefix` entry stands for (namePrefix only) |
| `nodes[].selector.matchLabels` | map | one of the four | nodes whose labels include all of these [2] |
| `nodes[].instanceType.name` | label value | one of the four | Karpenter's nodes of this instance type [10] |
| `nodes[].instanceType.price` | number > 0 | required | per hour: Karpenter launches the cheapest that fits |
| `nodes[].instanceType.memory` | quantity | 8Gi per CPU | the node's memory as Karpenter sees it |
| `nodes[].instanceType.zones` | label values | `[zone-a]` | the zones it is offered in |
| `nodes[].instanceType.architecture` | `amd64`, `arm64` | `amd64` | its nodes' `kubernetes.io/arch` |
| `nodes[].labels` | map | `{}` | labels the local test cluster sets on the node; the plugin ignores them |
| `nodes[].kubelet` | bool | true with GPUs | local test cluster: real kubelet, or kwok-simulated (false) |
| `nodes[].numaNodes` | integer 1..16 | 1 + top `numaNode` | NUMA nodes of each node; absent: unknown [8] |
| `nodes[].cpus` | integer | 16 per GPU | logical CPUs, split evenly over the NUMA nodes in blocks [8] |
| `nodes[].fabric.clique` | integer >= 0 | absent: no fabric | NVLink clique of its GPUs (NVML cliqueId) [9] |
| `nodes[].fabric.clusterUUID` | UUID | derived | NVML ClusterUUID; the all-zero UUID means no fabric [9] |
| `nodes[].gpus[]` | list | `[]` | the GPUs, minors 0..n-1 in this order; empty or absent: a plain worker |
| `nodes[].gpus[].profile` | string | required | GPU model, one of `fakeplugin profiles` |
| `nodes[].gpus[].count` | integer >= 1 | 1 | how many GPUs this entry describes |
| `nodes[].gpus[].ecc` | bool | profile's | ECC mode; picks the profile's memory total for that mode |
| `nodes[].gpus[].memory` | quantity | profile's | NVML memory.total: `23028Mi`, `15Gi` or bytes [3] |
| `nodes[].gpus[].productName` | string | profile's | NVML product name (<= 64 characters) |
| `nodes[].gpus[].uuid` | `GPU-` 8-4-4-4-12 hex | derived | fixed UUID; count 1 only; unique in the file [4] |
| `nodes[].gpus[].pciBusID` | `0000:3b:00.0` | derived | fixed PCI address; count 1 only; unique on node [4] |
| `nodes[].gpus[].numaNode` | integer >= 0 | spread | the NUMA node of every GPU of the entry [8] |
| `nodes[].gpus[].mig` | list | absent | MIG mode on, with these MIG devices created (`[]`: none) [5] |
| `nodes[].gpus[].mig[].profile` | string | required | MIG profile of the GPU's model, e.g. `1g.5gb` |
| `nodes[].gpus[].mig[].count` | integer >= 1 | 1 | how many such MIG devices |
| `nodes[].gpus[].mig[].placement` | integer | lowest free | first memory slice (a placement); count 1 |

[1] The slice attribute drops leading zeros (`580.95.5`), as the real driver's semver parse does.
[2] `{}` matches every node. The plugin takes the entry naming its node (by name, else by prefix and
    index), else the first entry (in file order) whose selector matches the node's labels.
[3] Required when the profile knows no memory total for the chosen ECC mode.
[4] Derived values come from the node name and minor (drivers.gpu.publish.devices). Overrides name exactly
    one device, hence count 1; NVML's `00000000:3B:00.0` form is accepted and normalised, and
    UUIDs are lower-cased. memory and productName apply to every GPU of the entry.
[5] As `nvidia-smi mig -cgi ... -C` left them: each GPU of the entry gets these MIG devices and is then
    published as them, not as a full GPU (static MIG). Devices without a placement take the lowest
    free ones, larger profiles first. With the plugin's DynamicMIG gate the devices are not published
    (the driver removes them); `mig` then only says that MIG mode is on, which matters on Ampere.
[6] A compact fleet: every generated node is as if it had its own `name` entry with the same fields
    (its identities derived from its own name). A fixed `uuid` needs `replicas: 1`. Indices are
    decimal without leading zeros, so `h100-7` is one of them and `h100-07` is not.
[7] fakeplugin.releases; docs/driver-releases.md shows what differs. `render --driver-release` and
    `serve --driver-release` (the chart's `driverRelease` value) override it.
[8] The GPU's NUMA node is its PCI sysfs `numa_node`: release 0.5.0-dev publishes it as
    `resource.kubernetes.io/numaNode`; the fake `nvidia-smi topo -m` shows it with the node's CPUs.
    Without `numaNodes` and `numaNode` the node is a VM whose sysfs says -1 (the H200 captures): no
    attribute, and topo shows NUMA 0 with every CPU. With NUMA nodes, a GPU without `numaNode` gets
    node `minor * numaNodes // GPUs` (8 GPUs on 2 nodes: 0-3 on 0, 4-7 on 1). NUMA node i holds CPUs
    `i*c .. (i+1)*c - 1`, c = cpus / numaNodes (real dual-socket hosts with SMT interleave their
    siblings, 0-55,112-167: not modelled).

[9] What NVML's GPU fabric info reports for every GPU of the node (a GB200/GB300 NVL72 compute tray): the
    compute-domain driver's clique ID is `<clusterUUID>.<clique>` (fakeplugin.drivers.computedomain); each
    GPU carries it (model.Board.fabric) and the fake `nvidia-smi -q` prints it (its Fabric section).
    Without `clusterUUID` every entry shares one fixed UUID (`DEFAULT_CLUSTER_UUID`), so the entries of
    one rack need only the same `clique`. A clique holds at most 18 nodes (NVIDIA's controller flag
    --max-nodes-per-imex-domain), counted over the file with replicas; fabric needs GPUs and named nodes
    (name or namePrefix: a selector's nodes cannot be counted).
[10] A GPU shape of a simulated cloud for Karpenter (docs/karpenter.md): a selector on
    `node.kubernetes.io/instance-type: <name>` whose nodes are always simulated (kwok's, served by
    `fakeplugin fleet`), and one instance type of Karpenter's kwok provider, whose ResourceSlice
    templates are this entry's devices (drivers.gpu.publish.instancetypes). Without GPUs: a CPU-only type.

Unknown fields anywhere are errors (typos never pass silently). The driver name is not
configuration: it is the `--driver-name` flag.

Every size has an upper bound that real hardware justifies (the `MAX_*` constants below; docs/inventory.md
has the table), checked while reading: the file's size before it is parsed, YAML depth and node count while
PyYAML composes it (aliases counted as what they repeat), list lengths before their items are read, counts
before anything is made of them. So no inventory makes the plugin or `validate` build more than a bounded
number of devices, however large the numbers in it.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin import quantity, releases
from fakeplugin.apis.computedomain import GPU_CLIQUE_LABEL
from fakeplugin.k8snames import is_dns_subdomain
from fakeplugin.mig import place
from fakeplugin.model import Fabric
from fakeplugin.profiles import MigProfile, Profile, UnknownProfileError, load_profile, profile_names
from fakeplugin.yamlschema import (
    Limits,
    Problems,
    SchemaError,
    join,
    parse_yaml,
    path_key,
    read_document,
    shorten,
)

_DRIVER_VERSION = re.compile(r"^\d{1,5}\.\d{1,5}(\.\d{1,5})?$")
_CUDA_VERSION = re.compile(r"^\d{1,5}\.\d{1,5}$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_CLUSTER_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
_PCI = re.compile(r"^(?:0000)?([0-9a-f]{4}):([0-9a-f]{2}):([01][0-9a-f])\.([0-7])$", re.IGNORECASE)
# The quantities a memory total is written as (NVML's MiB, kubectl's Gi): whole, binary, up to Ti.
_MEMORY_QUANTITY = re.compile(r"[0-9]+(Ki|Mi|Gi|Ti)?")
MAX_ATTRIBUTE_STRING = 64  # ResourceSlice attribute string values are at most 64 characters

# Upper bounds (docs/inventory.md, "Inventory bounds", says why each); all checked before devices are built.
MAX_FILE_BYTES = 1 << 20  # a ConfigMap holds at most 1 MiB, and the inventory usually is one
MAX_YAML_DEPTH = 16  # the schema nests 7 deep (nodes[].gpus[].mig[]); twice that and more is not an inventory
MAX_YAML_NODES = 100_000  # 20 per node entry for MAX_NODES entries; PyYAML needs ~70 MB to hold them
MAX_NODES = 5000  # Kubernetes' largest supported cluster
MAX_GPUS_PER_NODE = 128  # one full ResourceSlice; 8x the largest real node (16 GPUs: HGX-2, DGX-2)
MAX_GPUS = MAX_NODES * 16  # every node of the largest cluster as large as the largest real node
MAX_LABELS = 64  # per labels/matchLabels map; a selector needs a few, a GPU node carries ~50 with GFD
MAX_GPU_MEMORY = 1 << 40  # 1 TiB; the largest GPU memory today is 288 GB (B300)
MAX_NUMA_NODES = 16  # 8 sockets, or 2 sockets split 4 ways (AMD NPS4, Intel SNC-4), twice over
MAX_CPUS = 4096  # Linux's default NR_CPUS on x86_64 (8192 with MAXSMP); the largest hosts have ~3840
MAX_CLIQUE = 2**32 - 1  # NVML's nvmlGpuFabricInfo_t.cliqueId is an unsigned int
MAX_NODES_PER_CLIQUE = 18  # NVIDIA's compute-domain controller --max-nodes-per-imex-domain default (NVL72)
# The clusterUUID of entries that name none: fixed, so every such entry is in one NVLink cluster.
DEFAULT_CLUSTER_UUID = str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, "nvlink-cluster.fakeplugin.dev"))
CPUS_PER_GPU = 16  # default cpus: both H200 captures are VMs with 16 vCPUs per GPU (0-15, 0-31)
# The label Karpenter (and every cloud's node) carries the instance type in: an instanceType entry selects it.
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MEMORY_PER_CPU = 8 << 30  # an instanceType's default memory: 8Gi per CPU (a general-purpose cloud shape)
MAX_NODE_MEMORY = 64 << 40  # 64Ti: the largest single hosts (HPE/SGI shared-memory systems) reach 48 TiB
MAX_ZONES = 16
DEFAULT_ZONES = ("zone-a",)
ARCHITECTURES = ("amd64", "arm64")  # kubernetes.io/arch of an instanceType's nodes
LIMITS = Limits(max_bytes=MAX_FILE_BYTES, max_depth=MAX_YAML_DEPTH, max_nodes=MAX_YAML_NODES)


class InventoryError(SchemaError):
    """The inventory is invalid; str() has one line `<file>: <path>: <problem>` per problem."""


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU entry's static layout, placement resolved."""

    profile: MigProfile  # memory_mib is known (checked)
    start: int  # first memory slice; one of profile.placement_starts


@dataclass(frozen=True)
class GpuEntry:
    """One `gpus[]` entry, defaults applied and profile resolved."""

    profile: Profile
    count: int
    ecc: bool
    memory_bytes: int  # NVML memory.total: the override, else the profile's value for `ecc`
    product_name: str
    uuid: str | None  # override, normalised; only when count == 1
    pci_bus_id: str | None  # override, normalised to 0000:3b:00.0; only when count == 1
    path: str  # "nodes[1].gpus[0]", for messages
    mig: tuple[MigInstance, ...] | None = None  # None: MIG mode off; else the MIG devices of each GPU
    numa_node: int | None = None  # the inventory's numaNode; None: the node's default (NodeEntry.numa_node)


@dataclass(frozen=True)
class InstanceType:
    """An `instanceType` entry's own fields: what Karpenter's kwok provider offers (docs/karpenter.md)."""

    name: str  # the node.kubernetes.io/instance-type value
    price: float  # per hour; Karpenter launches the cheapest type that fits
    memory_bytes: int
    zones: tuple[str, ...]
    architecture: str = ARCHITECTURES[0]


@dataclass(frozen=True)
class NodeEntry:
    """One `nodes[]` entry: a node by name, `replicas` nodes by name prefix, or every node matching a
    label selector."""

    name: str | None
    match_labels: dict[str, str] | None  # None for entries by name or prefix
    labels: dict[str, str] = field(default_factory=dict)
    kubelet: bool = False
    gpus: tuple[GpuEntry, ...] = ()
    path: str = ""  # "nodes[1]"
    name_prefix: str | None = None
    replicas: int = 1  # nodes of a name_prefix entry
    numa_nodes: int | None = None  # None: NUMA unknown (sysfs numa_node -1, a VM)
    cpus: int = CPUS_PER_GPU  # a multiple of numa_nodes
    fabric: Fabric | None = None
    instance_type: InstanceType | None = None  # then match_labels is {INSTANCE_TYPE_LABEL: its name}

    @property
    def clique_id(self) -> str:
        """The clique ID of every node of the entry (`<clusterUUID>.<clique>`); "" without a fabric."""
        return self.fabric.clique_id if self.fabric else ""

    @property
    def node_labels(self) -> dict[str, str]:
        """The labels of every Node the entry names: its own, and the clique label of a fabric (as GPU
        Feature Discovery labels a node of a multi-node NVLink fabric)."""
        labels = dict(self.labels)
        if self.clique_id:
            labels[GPU_CLIQUE_LABEL] = self.clique_id
        return labels

    @property
    def gpu_count(self) -> int:
        """GPUs of each node the entry stands for."""
        return sum(g.count for g in self.gpus)

    def numa_node(self, gpu: GpuEntry, minor: int) -> int | None:
        """The NUMA node of GPU `minor` (one of `gpu`'s): its numaNode, else spread evenly in minor
        order; None when the node's NUMA layout is unknown."""
        if self.numa_nodes is None:
            return None
        if gpu.numa_node is not None:
            return gpu.numa_node
        return minor * self.numa_nodes // max(self.gpu_count, 1)

    def cpu_list(self, numa_node: int | None) -> str:
        """The CPUs of a NUMA node in Linux's list form (`0-15`); every CPU for None (unknown NUMA)."""
        per_node = self.cpus // (self.numa_nodes or 1)
        first = 0 if numa_node is None else numa_node * per_node
        last = self.cpus - 1 if numa_node is None else first + per_node - 1
        return f"{first}-{last}" if last > first else str(first)

    def node_names(self) -> list[str]:
        """The nodes this entry names: its name, or `<namePrefix><index>`; none for a selector."""
        if self.name_prefix is not None:
            return [f"{self.name_prefix}{i}" for i in range(self.replicas)]
        return [self.name] if self.name is not None else []

    def names(self, node_name: str) -> bool:
        """Whether `node_name` is this entry's name, or one of its generated names."""
        if self.name_prefix is None:
            return self.name == node_name
        index = node_name.removeprefix(self.name_prefix)
        return (
            node_name.startswith(self.name_prefix)
            and index.isdigit()
            and index.isascii()
            and str(int(index)) == index
            and int(index) < self.replicas
        )

    def selects(self, labels: dict[str, str]) -> bool:
        return self.match_labels is not None and all(labels.get(k) == v for k, v in self.match_labels.items())


@dataclass(frozen=True)
class Inventory:
    driver_version: str  # as NVML prints it: "580.95.05"
    cuda_driver_version: str  # "13.0"
    nodes: tuple[NodeEntry, ...]
    source: str  # file name, for messages
    driver_release: str = releases.DEFAULT_RELEASE  # a name in fakeplugin.releases.RELEASES

    def node_entry(self, node_name: str, labels: dict[str, str] | None = None) -> NodeEntry | None:
        """The entry serving `node_name`: by name or name prefix first, else the first matching selector."""
        for entry in self.nodes:
            if entry.names(node_name):
                return entry
        return next((e for e in self.nodes if e.selects(labels or {})), None)


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory file; InventoryError lists every problem."""
    source = str(path)
    text = read_document(path, source, InventoryError, LIMITS)
    return parse_inventory(parse_yaml(text, source, InventoryError, LIMITS), source=source)


def parse_inventory(data: Any, source: str = "<inventory>") -> Inventory:
    """Validate parsed YAML into an Inventory; InventoryError lists every problem."""
    p = Problems(source)
    if data is None:
        p.add("", "the inventory is empty; it needs driverVersion, cudaDriverVersion and nodes")
        raise InventoryError(p.lines)
    not_config = {
        "driverName": "the driver name is the --driver-name flag (env DRIVER_NAME), not configuration"
    }
    top = p.mapping(
        data,
        "",
        required=("driverVersion", "cudaDriverVersion", "nodes"),
        optional=("driverRelease",),
        hints=not_config,
    )
    if top is None:
        raise InventoryError(p.lines)
    driver = _version(p, top, "driverVersion", _DRIVER_VERSION, '"580.95.05" or "580.95"')
    cuda = _version(p, top, "cudaDriverVersion", _CUDA_VERSION, '"13.0"')
    release = _release(p, top)
    raw_nodes = p.sequence(top, "nodes", "")
    if raw_nodes == []:
        p.add("nodes", "must list at least one node")
    if raw_nodes is not None and len(raw_nodes) > MAX_NODES:
        p.add("nodes", f"{len(raw_nodes)} entries; at most {MAX_NODES} (Kubernetes' largest cluster)")
        raise InventoryError(p.lines)
    nodes = [_node(p, raw, f"nodes[{i}]") for i, raw in enumerate(raw_nodes or [])]
    named = sum(n.replicas for n in nodes if n is not None and n.match_labels is None)
    if named > MAX_NODES:
        p.add("nodes", f"{named} nodes named (replicas counted); at most {MAX_NODES}")
        raise InventoryError(p.lines)
    gpus = sum(n.gpu_count * n.replicas for n in nodes if n is not None)
    if gpus > MAX_GPUS:
        p.add("nodes", f"{gpus} GPUs in all; at most {MAX_GPUS} ({MAX_NODES} nodes of 16 GPUs)")
    _check_unique(p, [n for n in nodes if n is not None])
    _check_cliques(p, [n for n in nodes if n is not None])
    if not p.ok:
        raise InventoryError(p.lines)
    return Inventory(
        driver_version=driver,
        cuda_driver_version=cuda,
        nodes=tuple(nodes),
        source=source,
        driver_release=release,
    )


def parse_quantity(value: str) -> int:
    """Bytes of a binary quantity (`23028Mi`, `15Gi`, `1024`): fakeplugin.quantity's value of the forms
    `_MEMORY_QUANTITY` allows; ValueError otherwise."""
    if not _MEMORY_QUANTITY.fullmatch(value):
        raise ValueError(f'"{value}" is not a quantity like 23028Mi, 15Gi or a number of bytes')
    return quantity.value(value)


def _version(p: Problems, m: dict[str, Any], key: str, pattern: re.Pattern[str], example: str) -> str | None:
    value = p.string(m, key, "")
    if value is not None and not pattern.match(value):
        p.add(key, f'must be a version like {example}, got "{shorten(value)}"')
        return None
    return value


def _release(p: Problems, m: dict[str, Any]) -> str:
    """The driverRelease field as a release name (its tag is accepted too); the default when absent."""
    value = m.get("driverRelease", releases.DEFAULT_RELEASE)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        p.add(
            "driverRelease",
            f'must be a string: quote it, driverRelease: "{value}"; known: {releases.known()}',
        )
        return releases.DEFAULT_RELEASE
    if not isinstance(value, str):
        p.add("driverRelease", f"must be a string, one of: {releases.known()}")
        return releases.DEFAULT_RELEASE
    try:
        return releases.get(value).name
    except ValueError:
        p.add("driverRelease", f'unknown NVIDIA driver release "{shorten(value)}"; known: {releases.known()}')
        return releases.DEFAULT_RELEASE


def _labels(p: Problems, m: dict[str, Any], key: str, path: str) -> dict[str, str] | None:
    value = m.get(key)
    if isinstance(value, dict) and len(value) > MAX_LABELS:
        p.add(join(path, key), f"{len(value)} labels; at most {MAX_LABELS}")
        return None
    labels = p.string_map(m, key, path)
    for k, v in (labels or {}).items():
        prefix, _, name = k.rpartition("/")
        if (prefix and not is_dns_subdomain(prefix)) or len(name) > 63 or not _LABEL_NAME.match(name):
            p.add(join(join(path, key), path_key(k)), "is not a valid label key")
        elif len(v) > 63 or not _LABEL_VALUE.match(v):
            p.add(join(join(path, key), path_key(k)), f'"{shorten(v)}" is not a valid label value')
    return labels


def _node(p: Problems, raw: Any, path: str) -> NodeEntry | None:
    m = p.mapping(
        raw,
        path,
        optional=(
            "name",
            "namePrefix",
            "replicas",
            "selector",
            "labels",
            "kubelet",
            "gpus",
            "numaNodes",
            "cpus",
            "fabric",
            "instanceType",
        ),
    )
    if m is None:
        return None
    name = p.string(m, "name", path)
    if name is not None and not is_dns_subdomain(name):
        p.add(join(path, "name"), f'"{shorten(name)}" is not a valid node name (lower-case DNS subdomain)')
    prefix, replicas = _prefix(p, m, path)
    match_labels = None
    if "selector" in m:
        sel = p.mapping(m["selector"], join(path, "selector"), required=("matchLabels",))
        if sel is not None:
            match_labels = _labels(p, sel, "matchLabels", join(path, "selector"))
    if sum(key in m for key in ("name", "namePrefix", "selector", "instanceType")) != 1:
        p.add(
            path,
            "needs exactly one of name (one node), namePrefix (many), selector (nodes by label) or "
            "instanceType (Karpenter's nodes of that type)",
        )
    labels = _labels(p, m, "labels", path) if "labels" in m else {}
    # `gpus:` with nothing after it is YAML null: a plain worker, like an absent list.
    raw_gpus = p.sequence(m, "gpus", path) if m.get("gpus") is not None else []
    if raw_gpus is not None and len(raw_gpus) > MAX_GPUS_PER_NODE:  # every entry is at least one GPU
        p.add(join(path, "gpus"), f"{len(raw_gpus)} entries; a node has at most {MAX_GPUS_PER_NODE} GPUs")
        raw_gpus = None
    gpus = [_gpu(p, g, f"{path}.gpus[{i}]") for i, g in enumerate(raw_gpus or [])]
    kubelet = p.boolean(m, "kubelet", path)
    entries = tuple(g for g in gpus if g is not None)
    if sum(g.count for g in entries) > MAX_GPUS_PER_NODE:
        p.add(
            join(path, "gpus"),
            f"{sum(g.count for g in entries)} GPUs in all; a node has at most {MAX_GPUS_PER_NODE}",
        )
    if replicas > 1:
        for gpu in entries:
            if gpu.uuid is not None:
                p.add(join(gpu.path, "uuid"), f"a fixed UUID names one GPU; this entry has {replicas} nodes")
    numa_nodes, cpus = _numa(p, m, path, entries)
    fabric = _fabric(p, m, path, entries) if "fabric" in m else None
    instance_type = _instance_type(p, m, path, cpus) if "instanceType" in m else None
    if instance_type is not None:
        match_labels = {INSTANCE_TYPE_LABEL: instance_type.name}
    if "instanceType" in m and kubelet:
        p.add(
            join(path, "kubelet"), "an instanceType's nodes are Karpenter's, simulated: kubelet must be false"
        )
    return NodeEntry(
        name=name,
        match_labels=match_labels,
        labels=labels or {},
        kubelet=kubelet if kubelet is not None else any(g.count for g in entries) and "instanceType" not in m,
        gpus=entries,
        path=path,
        name_prefix=prefix,
        replicas=replicas,
        numa_nodes=numa_nodes,
        cpus=cpus,
        fabric=fabric,
        instance_type=instance_type,
    )


def _instance_type(p: Problems, m: dict[str, Any], path: str, cpus: int) -> InstanceType | None:
    """`instanceType: {name, price, memory, zones}`: a Karpenter instance type (docs/karpenter.md)."""
    where = join(path, "instanceType")
    t = p.mapping(
        m["instanceType"], where, required=("name", "price"), optional=("memory", "zones", "architecture")
    )
    if t is None:
        return None
    name = p.string(t, "name", where)
    if name is not None and (not name or len(name) > 63 or not _LABEL_VALUE.match(name)):
        p.add(
            join(where, "name"),
            f'"{shorten(name)}" is not a valid label value (the node\'s {INSTANCE_TYPE_LABEL})',
        )
        name = None
    price = t.get("price")
    if "price" in t and (
        isinstance(price, bool) or not isinstance(price, (int, float)) or not 0 < price < 1e6
    ):
        p.add(join(where, "price"), f"must be a number above 0 (per hour), got {shorten(repr(price))}")
        price = None
    memory = cpus * MEMORY_PER_CPU
    if "memory" in t:
        given = t["memory"]
        try:
            memory = parse_quantity(given) if isinstance(given, str) else -1
        except ValueError:
            memory = -1
        if not 0 < memory <= MAX_NODE_MEMORY:
            p.add(
                join(where, "memory"),
                f"must be a quantity like 256Gi, at most 64Ti, got {shorten(repr(given))}",
            )
    zones: tuple[str, ...] = DEFAULT_ZONES
    if "zones" in t:
        raw = p.sequence(t, "zones", where)
        if raw is not None and not 0 < len(raw) <= MAX_ZONES:
            p.add(join(where, "zones"), f"lists {len(raw)} zones; 1 to {MAX_ZONES}")
        elif raw is not None:
            bad = [
                z for z in raw if not isinstance(z, str) or not z or len(z) > 63 or not _LABEL_VALUE.match(z)
            ]
            if bad:
                p.add(join(where, "zones"), f"{shorten(repr(bad[0]))} is not a valid label value")
            zones = tuple(str(z) for z in raw)
    architecture = p.string(t, "architecture", where) if "architecture" in t else ARCHITECTURES[0]
    if architecture is not None and architecture not in ARCHITECTURES:
        p.add(
            join(where, "architecture"), f'"{shorten(architecture)}" is not one of {", ".join(ARCHITECTURES)}'
        )
        architecture = None
    if name is None or price is None or memory <= 0 or architecture is None:
        return None
    return InstanceType(name, float(price), memory, zones, architecture)


def _fabric(p: Problems, m: dict[str, Any], path: str, gpus: tuple[GpuEntry, ...]) -> Fabric | None:
    """`fabric: {clique, clusterUUID}`: only on entries that name their nodes and have GPUs."""
    where = join(path, "fabric")
    f = p.mapping(m["fabric"], where, required=("clique",), optional=("clusterUUID",))
    if f is None:
        return None
    clique = p.integer(f, "clique", where, minimum=0, maximum=MAX_CLIQUE, why="NVML's cliqueId is 32 bits")
    cluster = DEFAULT_CLUSTER_UUID
    if "clusterUUID" in f:
        given = _pattern(
            p, f, "clusterUUID", where, _CLUSTER_UUID, "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)"
        )
        cluster = given.lower() if given else cluster
    if "selector" in m or "instanceType" in m:
        p.add(where, "needs nodes by name or namePrefix: a selector's nodes cannot be counted into a clique")
    if not any(g.count for g in gpus):
        p.add(where, "needs gpus: the clique is what NVML reports for the node's GPUs")
    return None if clique is None else Fabric(clique, cluster)


def _check_cliques(p: Problems, nodes: list[NodeEntry]) -> None:
    """At most MAX_NODES_PER_CLIQUE nodes (replicas counted) share one clique ID in the file."""
    members: dict[str, list[NodeEntry]] = {}
    for node in nodes:
        if node.clique_id:
            members.setdefault(node.clique_id, []).append(node)
    for clique_id, entries in members.items():
        total = sum(e.replicas for e in entries)
        if total > MAX_NODES_PER_CLIQUE:
            listed = ", ".join(f"{e.path} ({e.replicas})" for e in entries)
            p.add(
                "nodes",
                f"clique {clique_id} has {total} nodes: {listed}; at most {MAX_NODES_PER_CLIQUE} nodes share "
                "one clique (NVIDIA's --max-nodes-per-imex-domain; an NVL72 rack has 18 compute trays)",
            )


def _numa(p: Problems, m: dict[str, Any], path: str, gpus: tuple[GpuEntry, ...]) -> tuple[int | None, int]:
    """`numaNodes` (default: 1 + the highest GPU numaNode, else None) and `cpus` (default: 16 per GPU),
    checked against each other and the GPUs' numaNode."""
    given = [g for g in gpus if g.numa_node is not None]
    numa_nodes = None
    if "numaNodes" in m:
        why = "8 sockets, or 2 split 4 ways, twice"
        numa_nodes = p.integer(m, "numaNodes", path, minimum=1, maximum=MAX_NUMA_NODES, why=why)
    elif given:
        numa_nodes = 1 + max(g.numa_node for g in given if g.numa_node is not None)
    for gpu in given:
        if "numaNodes" in m and numa_nodes is not None and (gpu.numa_node or 0) >= numa_nodes:
            p.add(
                join(gpu.path, "numaNode"),
                f"{gpu.numa_node} is not a NUMA node of this node (numaNodes is {numa_nodes}: "
                f"0..{numa_nodes - 1})",
            )
    cpus = CPUS_PER_GPU * max(sum(g.count for g in gpus), 1)
    if "cpus" in m:
        cpus = p.integer(m, "cpus", path, minimum=1, maximum=MAX_CPUS, why="Linux's NR_CPUS") or cpus
        if numa_nodes is not None and cpus % numa_nodes:
            p.add(
                join(path, "cpus"),
                f"{cpus} CPUs do not split evenly over {numa_nodes} NUMA nodes; "
                f"use a multiple of {numa_nodes}",
            )
    elif numa_nodes is not None and cpus % numa_nodes:
        cpus = numa_nodes * -(-cpus // numa_nodes)  # the default rounded up to split evenly
    return numa_nodes, cpus


def _prefix(p: Problems, m: dict[str, Any], path: str) -> tuple[str | None, int]:
    """`namePrefix` and `replicas` (1 when absent); the names they make must be node names."""
    prefix = p.string(m, "namePrefix", path)
    replicas = 1
    if "replicas" in m:
        why = "Kubernetes' largest cluster"
        replicas = p.integer(m, "replicas", path, minimum=1, maximum=MAX_NODES, why=why)
        if "namePrefix" not in m:
            p.add(join(path, "replicas"), "goes with namePrefix (a name or a selector is one entry)")
    if prefix is not None:
        last = f"{prefix}{(replicas or 1) - 1}"
        if not prefix or not is_dns_subdomain(last):
            p.add(
                join(path, "namePrefix"),
                f'"{shorten(prefix)}" makes invalid node names such as "{shorten(last)}" '
                "(lower-case DNS subdomain)",
            )
    return prefix, replicas or 1


def _gpu(p: Problems, raw: Any, path: str) -> GpuEntry | None:
    m = p.mapping(
        raw,
        path,
        required=("profile",),
        optional=("count", "ecc", "memory", "productName", "uuid", "pciBusID", "mig", "numaNode"),
    )
    if m is None:
        return None
    profile = None
    name = p.string(m, "profile", path)
    if name is not None:
        try:
            profile = load_profile(name)
        except UnknownProfileError:
            p.add(
                join(path, "profile"),
                f'unknown profile "{shorten(name)}" (known: {", ".join(profile_names())})',
            )
    count = (
        p.integer(m, "count", path, minimum=1, maximum=MAX_GPUS_PER_NODE, why="GPUs per node")
        if "count" in m
        else 1
    )
    ecc = p.boolean(m, "ecc", path)
    memory = _memory(p, m, path)
    product = p.string(m, "productName", path)
    if product is not None and len(product) > MAX_ATTRIBUTE_STRING:
        p.add(join(path, "productName"), f"must be at most {MAX_ATTRIBUTE_STRING} characters")
    uuid = _pattern(p, m, "uuid", path, _UUID, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)")
    bus = _pattern(p, m, "pciBusID", path, _PCI, '"0000:3b:00.0" (domain:bus:device.function, hex)')
    numa_node = None
    if "numaNode" in m:
        why = "the most NUMA nodes of a node"
        numa_node = p.integer(m, "numaNode", path, minimum=0, maximum=MAX_NUMA_NODES - 1, why=why)
    for key in ("uuid", "pciBusID"):
        if key in m and count is not None and count > 1:
            p.add(join(path, key), f"names one GPU, so it needs count 1 (count is {count})")
    if profile is None or count is None:
        return None
    mig = _mig(p, m, path, profile) if "mig" in m else None
    ecc = profile.ecc_default if ecc is None else ecc
    if memory is None and "memory" not in m:
        memory = profile.memory_bytes(ecc)
        if memory is None:
            p.add(
                join(path, "ecc" if "ecc" in m else "profile"),
                f'profile "{profile.name}" knows no memory total with ECC {"on" if ecc else "off"}; '
                "set memory to the real NVML memory.total (a quantity like 23028Mi)",
            )
    # A None memory was reported above, so this entry never reaches a valid Inventory.
    return GpuEntry(
        profile=profile,
        count=count,
        ecc=ecc,
        memory_bytes=memory or 0,
        product_name=product or profile.product_name,
        uuid=uuid and "GPU-" + uuid[4:].lower(),
        pci_bus_id=bus and _normalise_pci(bus),
        path=path,
        mig=mig,
        numa_node=numa_node,
    )


def _mig(p: Problems, m: dict[str, Any], path: str, profile: Profile) -> tuple[MigInstance, ...] | None:
    """A static MIG layout: every item valid, of a MIG profile whose memory is known, within the profiles'
    instance limits, no memory slice twice."""
    problems_before = len(p.lines)
    raw = p.sequence(m, "mig", path)
    where = join(path, "mig")
    if raw is None:
        return None
    if profile.mig is None:
        p.add(where, f'profile "{profile.name}" is not MIG capable')
        return None
    most = max(mp.instances for mp in profile.mig.profiles)  # 7 on A100, H100, H200
    if len(raw) > most:  # every item is at least one MIG device
        p.add(where, f"{len(raw)} entries; a {profile.name} has at most {most} MIG devices")
        return None
    by_name = {mp.name: mp for mp in profile.mig.profiles}
    fixed: list[tuple[MigProfile, int, str]] = []  # (profile, start, item path)
    free: list[MigProfile] = []  # placed automatically
    per_profile: dict[str, int] = {}
    for i, item in enumerate(raw):
        item_path = f"{where}[{i}]"
        im = p.mapping(item, item_path, required=("profile",), optional=("count", "placement"))
        if im is None:
            continue
        name = p.string(im, "profile", item_path)
        mig_profile = by_name.get(name) if name is not None else None
        if name is not None and mig_profile is None:
            p.add(
                join(item_path, "profile"),
                f'unknown MIG profile "{shorten(name)}" of {profile.name} (known: {", ".join(by_name)})',
            )
        # No maximum here: the profile's instance limit below refuses a large count before it is used.
        count = p.integer(im, "count", item_path, minimum=1) if "count" in im else 1
        start = p.integer(im, "placement", item_path, minimum=0) if "placement" in im else None
        if "placement" in im and count is not None and count > 1:
            p.add(join(item_path, "placement"), f"names one MIG device, so it needs count 1, not {count}")
            continue
        if mig_profile is None or count is None:
            continue
        if mig_profile.memory_mib is None:
            p.add(
                join(item_path, "profile"),
                f'profile "{profile.name}" knows no real memory size of its MIG profile {mig_profile.name}, '
                "so such MIG devices cannot be published",
            )
            continue
        if start is not None and start not in mig_profile.placement_starts:
            p.add(
                join(item_path, "placement"),
                f"{start} is not a placement of {mig_profile.name} "
                f"(placements: {', '.join(map(str, mig_profile.placement_starts))})",
            )
            continue
        per_profile[mig_profile.name] = per_profile.get(mig_profile.name, 0) + count
        if per_profile[mig_profile.name] > mig_profile.instances:
            p.add(
                join(item_path, "count"),
                f"{per_profile[mig_profile.name]} x {mig_profile.name} exceed the profile's "
                f"{mig_profile.instances} instance{'s' if mig_profile.instances > 1 else ''} on a GPU",
            )
            continue
        if start is not None:
            fixed.append((mig_profile, start, item_path))
        else:
            free += [mig_profile] * count
    taken: dict[int, str] = {}  # memory slice → the item holding it
    for mig_profile, start, item_path in fixed:
        span = range(start, start + mig_profile.placement_size)
        clash = sorted({taken[s] for s in span if s in taken})
        if clash:
            p.add(
                join(item_path, "placement"),
                f"{mig_profile.name} at {start} uses memory slices {span.start}-{span.stop - 1}, "
                f"overlapping {', '.join(clash)}",
            )
        taken.update({s: item_path for s in span})
    if len(p.lines) > problems_before:
        return None
    starts = place([(mp.placement_starts, mp.placement_size) for mp in free], frozenset(taken))
    if starts is None:
        wanted = ", ".join(mp.name for mp in free)
        p.add(where, f"the MIG devices do not fit on one GPU: no free placements left for {wanted}")
        return None
    placed = [(mp, start) for mp, start, _ in fixed] + list(zip(free, starts, strict=True))
    return tuple(MigInstance(mp, start) for mp, start in sorted(placed, key=lambda ms: ms[1]))


def _memory(p: Problems, m: dict[str, Any], path: str) -> int | None:
    if "memory" not in m:
        return None
    value = m["memory"]
    try:
        memory = parse_quantity(value) if isinstance(value, str) else value
    except ValueError:
        memory = None
    if isinstance(value, str):
        shown = repr(shorten(value))
    else:  # as YAML gave it: an integer, or whatever else was written (shortened)
        shown = path_key(value) if isinstance(value, int) else shorten(repr(value))
    if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
        p.add(join(path, "memory"), f"must be a positive quantity like 23028Mi or 15Gi, got {shown}")
        return None
    if memory > MAX_GPU_MEMORY:
        p.add(join(path, "memory"), f"must be at most 1Ti (the largest GPU has 288 GB), got {shown}")
        return None
    return memory


def _pattern(
    p: Problems, m: dict[str, Any], key: str, path: str, pattern: re.Pattern[str], form: str
) -> str | None:
    value = p.string(m, key, path)
    if value is not None and not pattern.match(value):
        p.add(join(path, key), f'must look like {form}, got "{shorten(value)}"')
        return None
    return value


def _normalise_pci(value: str) -> str:
    """NVML's 00000000:3B:00.0 or 0000:3b:00.0 → 0000:3b:00.0, as go-nvlib's GetPCIBusID."""
    domain, bus, device, function = _PCI.match(value).groups()  # type: ignore[union-attr]  # validated
    return f"{domain}:{bus}:{device}.{function}".lower()


def _check_unique(p: Problems, nodes: list[NodeEntry]) -> None:
    """Node names unique in the file; UUID overrides unique in the file; bus IDs unique per node."""
    names: dict[str, str] = {}
    uuids: dict[str, str] = {}
    types: dict[str, str] = {}
    for node in nodes:
        kind = node.instance_type.name if node.instance_type is not None else None
        if kind is not None:
            if kind in types:
                p.add(
                    join(node.path, "instanceType.name"),
                    f'duplicate instance type "{kind}" (also {types[kind]})',
                )
            types.setdefault(kind, node.path)
        field = "name" if node.name_prefix is None else "namePrefix"
        for name in node.node_names():
            if name in names:
                p.add(join(node.path, field), f'duplicate node name "{name}" (also {names[name]})')
                break
            names.setdefault(name, node.path)
        buses: dict[str, str] = {}
        for gpu in node.gpus:
            if gpu.uuid is not None:
                if gpu.uuid in uuids:
                    p.add(join(gpu.path, "uuid"), f'duplicate uuid "{gpu.uuid}" (also {uuids[gpu.uuid]})')
                uuids.setdefault(gpu.uuid, gpu.path)
            if gpu.pci_bus_id is not None:
                if gpu.pci_bus_id in buses:
                    p.add(
                        join(gpu.path, "pciBusID"),
                        f'duplicate pciBusID "{gpu.pci_bus_id}" on this node (also {buses[gpu.pci_bus_id]})',
                    )
                buses.setdefault(gpu.pci_bus_id, gpu.path)
