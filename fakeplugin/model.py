"""Version-neutral core types shared by the gRPC edge, the prepare core and the device model.

Nothing here knows about protobuf, the Kubernetes API or files.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it in NodePrepare/NodeUnprepare requests."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


class ClaimState(StrEnum):
    """Where a claim stands in a driver's checkpoint (NVIDIA's ClaimCheckpointState, both kubelet plugins:
    cmd/gpu-kubelet-plugin and cmd/compute-domain-kubelet-plugin checkpoint.go). The GPU plugin writes the
    first two; the ComputeDomain plugin also marks a claim whose Prepare it gave up (PrepareAborted)."""

    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    PREPARE_ABORTED = "PrepareAborted"


@dataclass(frozen=True)
class PreparedDevice:
    """One device handed to the kubelet for a claim (wire: Device)."""

    pool_name: str
    device_name: str
    request_names: tuple[str, ...]
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    """Outcome of preparing one claim; a non-empty error means the claim failed and devices are ignored."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""
    retryable: bool = False  # the failure may pass on its own (a driver may retry it within the call)


@dataclass(frozen=True)
class MigResources:
    """What a GPU-instance profile gives a MIG device, as NVML's GpuInstanceProfileInfo reports it."""

    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_bytes: int  # memorySizeMB * 1 MiB


@dataclass(frozen=True)
class MigPlacement:
    """A MIG device's GPU-instance profile and where it sits on its parent GPU."""

    profile: str  # "1g.18gb", "1g.18gb+me"
    gi_profile_id: int  # the GI profile ID of `nvidia-smi mig -lgip` (19 for 1g.18gb), used in names
    start: int  # first memory slice
    size: int  # memory slices [start, start + size)
    resources: MigResources


@dataclass(frozen=True)
class CounterSet:
    """DynamicMIG: the shared counters of one MIG-capable GPU that its partitions and itself consume."""

    name: str  # gpu-<minor>-counter-set
    resources: MigResources  # per-dimension maxima over the GPU's MIG profiles
    memory_slices: int  # one counter per memory slice: memory-slice-0 .. memory-slice-<n-1>


ZERO_UUID = "00000000-0000-0000-0000-000000000000"  # the ClusterUUID of a GPU outside a multi-node fabric


@dataclass(frozen=True)
class Fabric:
    """A GPU's NVLink fabric as NVML's GPU fabric info reports it: the inventory's `nodes[].fabric`, the
    same for every GPU of a node (or, outside a multi-node domain, CliqueId 0 and the zero ClusterUUID:
    Board.reported_fabric); registered (state Completed, status Success) unless the node's fabric-state
    fault (fakeplugin.faults.fabricfaults) says otherwise."""

    clique: int  # NVML cliqueId
    cluster_uuid: str  # NVML clusterUuid, lower-case
    state: str = "Completed"  # the registration state as nvidia-smi prints it
    status: str = "Success"  # nvmlErrorString of the registration's status; "N/A" before it completed

    @property
    def registered(self) -> bool:
        return self.state == "Completed" and self.status == "Success"

    @property
    def clique_id(self) -> str:
        """NVIDIA's clique ID `<clusterUUID>.<clique>`; "" for the zero cluster UUID (no fabric)."""
        return "" if self.cluster_uuid == ZERO_UUID else f"{self.cluster_uuid}.{self.clique}"


# The Health rows of `nvidia-smi -q`'s Fabric section, in its order, as the fabric.health.* query fields
# name them (the H200 capture, 580.159.04).
FABRIC_HEALTH_ROWS = (
    "summary",
    "bandwidth",
    "route_recovery_in_progress",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
    "partition_assigned",
)


@dataclass(frozen=True)
class FabricReport:
    """What NVML's GPU fabric info reports for a GPU model when its node is in no multi-node NVLink domain
    (a profile's `smi.fabric`): registered (state Completed, status Success, CliqueId 0, the zero
    ClusterUUID: HGX Hopper and Blackwell) or not supported (every row N/A: A100, T4, L40S)."""

    registered: bool
    health: tuple[tuple[str, str], ...] = ()  # (FABRIC_HEALTH_ROWS entry, value) NVML reports; others N/A


@dataclass(frozen=True)
class Board:
    """What nvidia-smi shows of the physical GPU beyond its slice attributes; fixed when the device is made.

    A MIG device carries its parent's board: nvidia-smi lists physical GPUs and their MIG devices under them.
    """

    ecc: bool  # ECC mode (it decides memory_bytes when the inventory does not override it)
    memory_bytes: int  # the physical GPU's NVML memory.total
    pci_device_id: int  # 16-bit PCI device id, e.g. 0x2231
    pci_subsystem_id: int | None
    power_limit_watts: int | None
    reserved_memory_mib: int | None
    bar1_memory_mib: int | None
    mig_capable: bool
    nvlinks: int = 0  # NVLinks to each peer of its model on the node (`topo -m` NV#); 0: PCIe only
    # `topo -m` CPU and NUMA affinity: the CPUs of the GPU's NUMA node (every CPU when NUMA is unknown).
    cpu_affinity: str = "N/A"
    numa_affinity: str = "N/A"
    gpu_numa_id: str = "N/A"  # `topo -m` GPU NUMA ID: the first NUMA node of the GPU's own memory
    # The node's multi-node NVLink fabric (`nvidia-smi -q` Fabric section, fabric.* query fields), with the
    # node's fabric-state fault applied (fakeplugin.faults.fabricfaults); None: the node is in none, and
    # the GPU reports its model's fabric_report (reported_fabric).
    fabric: Fabric | None = None
    # The model's fabric info outside a multi-node domain, and its health rows in one; None: unknown, the
    # fake nvidia-smi prints no Fabric section (unless the node has a fabric).
    fabric_report: FabricReport | None = None

    @property
    def reported_fabric(self) -> Fabric | None:
        """The fabric NVML's GPU fabric info reports: the node's (`fabric`), else, for a model that
        registers outside a multi-node domain (fabric_report.registered), CliqueId 0 and the zero
        ClusterUUID; None where the model's fabric info is not supported or unknown."""
        if self.fabric is not None:
            return self.fabric
        if self.fabric_report is not None and self.fabric_report.registered:
            return Fabric(0, ZERO_UUID)
        return None


VFIO_NAME_PREFIX = "gpu-vfio-"  # deviceinfo.go VfioDeviceInfo.CanonicalName: gpu-vfio-<index>


@dataclass(frozen=True)
class VfioFunction:
    """A GPU as the PCI bus shows it for passthrough (a `vfio` device's, go-nvlib nvpci NvidiaPCIDevice)."""

    index: int  # position among the node's NVIDIA GPUs in PCI address order (nvpci GetGPUs)
    device_id: int  # 16-bit PCI device id
    device_name: str  # the PCI ID database's name, "UNKNOWN_DEVICE" when it has none (nvpci)
    iommu_group: int  # /sys/bus/pci/devices/<bus id>/iommu_group
    iommufd: str  # the iommufd cdev once bound to vfio-pci: vfio-dev/vfio<N>
    iommufd_enabled: bool  # the host has /dev/iommu (IOMMUFD)
    addressable_memory_bytes: int  # 64-bit BARs, summed and rounded up to a power of two


@dataclass(frozen=True)
class GpuDevice:
    """One device of this node's pool, with everything the slice and the CDI spec need.

    Values are kept as the hardware (NVML) reports them; rendering into ResourceSlice attribute
    types (versions, quantities) happens in fakeplugin.drivers.gpu.publish.slices.
    """

    # Canonical name in the pool: gpu-<minor>, gpu-<minor>-mig-<profile>-<giProfileId>-<start>, gpu-vfio-<n>.
    name: str
    type: str  # "gpu", "mig" or "vfio"
    minor: int  # N of /dev/nvidiaN (a MIG device's parent)
    index: int  # NVML enumeration index on the node (a MIG device's parent)
    uuid: str  # GPU-<8-4-4-4-12 hex>, MIG-<8-4-4-4-12 hex>; "" for a DynamicMIG partition not yet created
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str  # "7.5"
    driver_version: str  # the kernel driver as NVML reports it, e.g. "580.95.05"; not a DRA driver release
    cuda_driver_version: str  # "13.0"
    memory_bytes: int  # NVML memory.total (a MIG device: its profile's memory)
    pci_bus_id: str  # "0000:3b:00.0"
    pcie_root: str | None  # "pci0000:3a"; None when the real driver would omit it
    addressing_mode: str | None  # "HMM" / "ATS" / "None"; None when NVML says NOT_SUPPORTED
    profile: str  # the profile the device was made from, e.g. "t10"
    board: Board  # what nvidia-smi shows beyond the attributes
    parent_uuid: str | None = None  # MIG devices: the parent GPU's UUID
    mig: MigPlacement | None = None  # MIG devices (static and DynamicMIG partitions)
    counter_set: CounterSet | None = None  # DynamicMIG: the parent's counters this device consumes
    numa_node: int | None = None  # PCI sysfs numa_node (a MIG device: its parent's); None when unknown (-1)
    vfio: VfioFunction | None = None  # VFIO devices (PassthroughSupport): the GPU's PCI function


@dataclass(frozen=True)
class DeviceSettings:
    """What a device's effective opaque config (GpuConfig/MigDeviceConfig sharing) applied to it, typed.

    Made by drivers.gpu.prepare.opaqueconfig, kept in the checkpoint as is, shown by the fake nvidia-smi
    (compute mode) and rendered into container env only in the CDI spec (drivers.gpu.prepare.cdispec).
    """

    strategy: str  # TimeSlicing | MPS; "" for a VFIO device (VfioDeviceConfig shares nothing)
    timeslice_interval: str | None = None  # TimeSlicing on a full GPU
    mps_control_daemon: str | None = None
    mps_active_thread_percentage: int | None = None
    mps_pinned_device_memory_limit: str | None = None  # "<MiB>M"
    mps_multi_user: bool = False
    # VfioDeviceConfig's `iommu` (v0.4.0+), normalized: LegacyOnly | PreferIommuFD; None: 25.12, no `iommu`.
    iommu_backend_policy: str | None = None
    iommu_api_device: bool = False  # iommu.enableAPIDevice
