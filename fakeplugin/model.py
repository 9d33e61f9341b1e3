"""Version-neutral core types shared by the gRPC edge, the prepare core and the device model.

Nothing here knows about protobuf, the Kubernetes API or files.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClaimRef:
    """A ResourceClaim as the kubelet names it in NodePrepare/NodeUnprepare requests."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.uid}"


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


@dataclass(frozen=True)
class GpuDevice:
    """One device of this node's pool, with everything the slice and the CDI spec need.

    Values are kept as the hardware (NVML) reports them; rendering into ResourceSlice attribute
    types (versions, quantities) happens in fakeplugin.slices.
    """

    name: str  # canonical name in the pool: gpu-<minor>
    type: str  # "gpu"
    minor: int  # N of /dev/nvidiaN
    index: int  # NVML enumeration index on the node
    uuid: str  # GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str  # "7.5"
    driver_version: str  # as NVML reports it, e.g. "580.95.05"
    cuda_driver_version: str  # "13.0"
    memory_bytes: int  # NVML memory.total
    pci_bus_id: str  # "0000:3b:00.0"
    pcie_root: str | None  # "pci0000:3a"; None when the real driver would omit it
    addressing_mode: str | None  # "HMM" / "ATS" / "None"; None when NVML says NOT_SUPPORTED
    profile: str  # the profile the device was made from, e.g. "t10"
