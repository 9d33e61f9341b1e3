"""The inventory as the program holds it: frozen entries, defaults applied, every value checked by
inventory.parse. Data, and what describes an entry (the nodes it names, their labels, its GPU count); the
values a node's devices get from it (NUMA node, CPU list) are the GPU driver's rules
(drivers.gpu.publish.devices)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fakeplugin import releases
from fakeplugin.apis.computedomain import GPU_CLIQUE_LABEL
from fakeplugin.inventory.fields import ARCHITECTURES, CPUS_PER_GPU, GPU_OPERATOR_MODES, MIG_STRATEGIES
from fakeplugin.model import Fabric
from fakeplugin.profiles import MigProfile, Profile


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
    numa_node: int | None = None  # the inventory's numaNode; None: the node's default (publish.devices)


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
    gpu_operator: str = GPU_OPERATOR_MODES[0]  # its own gpuOperator, else the file's

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
    # Two different drivers (docs/architecture.md, "Words"): `driver_version` is the NVIDIA kernel driver
    # the nodes' GPUs report (NVML, nvidia-smi, the driverVersion attribute); `driver_release` is the
    # release of NVIDIA's DRA driver we emulate (its attributes, classes, gates, slice names).
    driver_version: str  # as NVML prints it: "580.95.05"
    cuda_driver_version: str  # "13.0"
    nodes: tuple[NodeEntry, ...]
    source: str  # file name, for messages
    driver_release: str = releases.DEFAULT_RELEASE  # a name in fakeplugin.releases.RELEASES
    gpu_operator: str = GPU_OPERATOR_MODES[0]  # the top level's; each NodeEntry has its own, resolved
    mig_strategy: str = MIG_STRATEGIES[0]  # the ClusterPolicy's mig.strategy: GFD's MIG labels

    def node_entry(self, node_name: str, labels: dict[str, str] | None = None) -> NodeEntry | None:
        """The entry serving `node_name`: by name or name prefix first, else the first matching selector."""
        for entry in self.nodes:
            if entry.names(node_name):
                return entry
        return next((e for e in self.nodes if e.selects(labels or {})), None)
