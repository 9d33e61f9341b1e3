"""Device health for the kubelet (KEP-4680, `NodeWatchResources`), pure: whether the GPU plugin serves it,
and each device's status from its kind and the faults it has had.

No NVIDIA release serves it. At every release fakeplugin emulates (v25.12.0, v0.4.1, main 95932046) the
driver type implements neither `NodeWatchResources` nor `WatchHealthStatus`, and the vendored
k8s.io/dynamic-resource-allocation kubeletplugin/draplugin.go (`Start`) advertises and registers
v1alpha1.DRAResourceHealth only for a plugin that implements `DRAResourceHealthServer`: the kubelet's
call gets gRPC Unimplemented (`unknown service v1alpha1.DRAResourceHealth`, grpc-go's answer for an
unregistered service). v0.5.0 still has none (issue #1423, 2026-09-03, after the tag; fixed by PR #1425,
which only stops advertising it).

What `serve --device-health` serves instead is the design of kubernetes-sigs/dra-driver-nvidia-gpu
PR #1243 (commit 46c7cc25, 2026-07-31; closed unmerged): cmd/gpu-kubelet-plugin/device_health_status.go
(`newDeviceHealth`, `updateDeviceHealth`), driver.go (`kubeletplugin.HealthService(featuregates.Enabled(
NVMLDeviceHealthCheck))`), cmd/compute-domain-kubelet-plugin/driver.go (`HealthService(false)`):

- served by the GPU plugin only, and only with the gate NVMLDeviceHealthCheck on;
- full GPUs and static MIG devices start Healthy; DynamicMIG partitions and VFIO devices, which its NVML
  monitor does not watch, are Unknown with "<type> devices are not covered by the NVML health monitor";
- a fault sets the status as the taints do (devicefaults.DeviceFault: critical XID or GPU lost Unhealthy,
  a skipped XID Healthy with its message); Unhealthy is sticky: nothing but a restart of the plugin makes
  the device Healthy again, so a cleared fault leaves it Unhealthy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from fakeplugin.faults.devicefaults import DeviceFault
from fakeplugin.model import GpuDevice

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
UNKNOWN = "Unknown"

GATE = "NVMLDeviceHealthCheck"
GPU_PLUGIN = "gpus"
# PR #1243 newDeviceHealth: the device types its NVML monitor watches (types.go GpuDeviceType,
# MigStaticDeviceType); the others are MigDynamicDeviceType "migdyn" and VfioDeviceType "vfio".
MONITORED_KINDS = frozenset({"gpu", "mig"})
DYNAMIC_MIG = "migdyn"


@dataclass(frozen=True)
class Health:
    status: str  # HEALTHY, UNHEALTHY or UNKNOWN
    message: str = ""


def not_served(requested: bool, plugin: str, gates: Mapping[str, bool]) -> str:
    """Why the health service is not served ("" when it is): not requested (every release), the
    ComputeDomain plugin, or the gate off."""
    if not requested:
        return "not requested (no NVIDIA release serves it; --device-health serves PR #1243's design)"
    if plugin != GPU_PLUGIN:
        return f"the {plugin} plugin never serves it (PR #1243: HealthService(false))"
    if not gates.get(GATE, False):
        return f"feature gate {GATE} is off (PR #1243 advertises it only with the gate on)"
    return ""


def kind(device: GpuDevice) -> str:
    """The driver's device type: a MIG device with a counter set is a DynamicMIG partition."""
    return DYNAMIC_MIG if device.type == "mig" and device.counter_set is not None else device.type


def initial(kind: str) -> Health:
    """A device's health when the plugin starts or the device appears (PR #1243 newDeviceHealth)."""
    if kind in MONITORED_KINDS:
        return Health(HEALTHY)
    return Health(UNKNOWN, f"{kind} devices are not covered by the NVML health monitor")


def step(current: Health, kind: str, fault: DeviceFault | None) -> Health:
    """The health after the device's fault is seen (None: no fault now). A fault's status and message are
    its taint's (updateDeviceHealth); an Unhealthy device stays Unhealthy, with the message that made it
    so, unless a new Unhealthy fault replaces the message; unwatched kinds see no faults."""
    if fault is None or kind not in MONITORED_KINDS or (fault.xid is None and not fault.lost):
        return current
    seen = Health(HEALTHY if fault.healthy else UNHEALTHY, fault.message)
    if current.status == UNHEALTHY and seen.status != UNHEALTHY:
        return current
    return seen
