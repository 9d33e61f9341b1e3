"""Device faults on demand: a Node's `fakeplugin.dev/device-faults` annotation, parsed, and the device
taints and health NVIDIA's driver gives such devices (pure).

    fakeplugin.dev/device-faults: "gpu-0=xid:79,gpu-1=gpu-lost,gpu-2-mig-1g.5gb-9-0=xid:13"

NVIDIA's driver (feature gate NVMLDeviceHealthCheck) watches NVML events and taints the device in its
ResourceSlice; verified in kubernetes-sigs/dra-driver-nvidia-gpu (main, commit 95932046, 2026-08-07),
cmd/gpu-kubelet-plugin/device_health.go (`healthEventToTaint`, `xidsToSkip`), driver.go
(`deviceHealthEvents`), allocatable.go (`AddOrUpdateTaint`); the health messages from PR #1243 (commit
46c7cc25, unmerged: no release serves device health) device_health_status.go (`updateDeviceHealth`):

- an XID event: taint `gpu.nvidia.com/xid`, value the XID in decimal, effect `NoSchedule`; effect `None`
  for the XIDs it skips as application errors (13, 31, 43, 45, 68, 109; more with its
  additionalXidsToIgnore flag, not emulated);
- GPU lost: taint `gpu.nvidia.com/gpu-lost`, no value, effect `NoSchedule`;
- one taint per key and device: a later XID replaces the value and effect of the earlier one;
- health (KEP-4680, fakeplugin.faults.devicehealth): a fatal XID or a lost GPU is Unhealthy ("critical
  XID 79 reported by NVML", "GPU is lost"); a skipped XID stays Healthy ("non-fatal XID 13 reported by NVML").

The taint key's domain is the driver name (`DriverName + "/xid"` upstream), so with `--driver-name` it
follows ours. Release v25.12.0 predates these taints (it only marked devices unhealthy); they are on
main. Differences: the real taints are sticky until the driver restarts; ours follow the annotation, so
removing it removes them (the health service's Unhealthy stays, as upstream's).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

ANNOTATION = "fakeplugin.dev/device-faults"
# device_health.go xidsToSkip: "Application errors: the GPU should still be healthy."
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
MAX_XID = 2**64 - 1  # NVML's event data is a uint64
MAX_ENTRIES = 256  # 128 devices per node (the inventory's bound), an XID and a gpu-lost each


class DeviceFaultError(ValueError):
    """The node's device-faults annotation cannot be parsed."""


# The taint effect `None` (informational) came in Kubernetes 1.35: pkg/apis/resource/types.go
# DeviceTaintEffectNone, validation.go validDeviceTaintEffects at v1.35.4; v1.34.4 has NoSchedule and
# NoExecute only.
EFFECT_NONE_SINCE = (1, 35)


@dataclass(frozen=True)
class DeviceFault:
    """One device's faults: its latest XID (None: none) and whether it is lost."""

    xid: int | None = None
    lost: bool = False

    def taints(
        self, driver: str, server_version: tuple[int, int] = EFFECT_NONE_SINCE
    ) -> list[dict[str, Any]]:
        """The device's taints in API shape, in the order the real driver adds them (XID, then lost), for an
        API server of `server_version` (major, minor): before 1.35 a skipped XID leaves no taint, since
        that server refuses a slice with the `None` effect, which would stop all publishing."""
        taints: list[dict[str, Any]] = []
        if self.xid is not None:
            effect = "None" if self.xid in IGNORED_XIDS else "NoSchedule"
            if effect == "NoSchedule" or server_version >= EFFECT_NONE_SINCE:
                taints.append({"key": f"{driver}/xid", "value": str(self.xid), "effect": effect})
        if self.lost:
            taints.append({"key": f"{driver}/gpu-lost", "effect": "NoSchedule"})
        return taints

    @property
    def healthy(self) -> bool:
        return not self.lost and (self.xid is None or self.xid in IGNORED_XIDS)

    @property
    def message(self) -> str:
        """The health message the real driver reports (device_health_status.go updateDeviceHealth)."""
        if self.lost:
            return "GPU is lost"
        if self.xid is None:
            return ""
        kind = "non-fatal" if self.xid in IGNORED_XIDS else "critical"
        return f"{kind} XID {self.xid} reported by NVML"


NO_FAULTS: MappingProxyType[str, DeviceFault] = MappingProxyType({})


def parse_device_faults(value: str | None) -> dict[str, DeviceFault]:
    """Device name → its fault, from `name=xid:N` and `name=gpu-lost` entries separated by commas.

    DeviceFaultError names the annotation, the value and the bad entry. Whether a name is a device of
    the node is for the caller to say (it knows the devices)."""
    faults: dict[str, DeviceFault] = {}
    if value is None or not value.strip():
        return faults
    entries = [e.strip() for e in value.split(",")]
    if len(entries) > MAX_ENTRIES:
        raise DeviceFaultError(f"annotation {ANNOTATION}: {len(entries)} entries, at most {MAX_ENTRIES}")
    for entry in entries:
        name, sep, fault = (part.strip() for part in entry.partition("="))
        if not entry or not sep or not name:
            raise _bad(value, entry, "expected DEVICE=xid:N or DEVICE=gpu-lost")
        current = faults.get(name, DeviceFault())
        if fault == "gpu-lost":
            faults[name] = DeviceFault(current.xid, lost=True)
            continue
        kind, _, number = fault.partition(":")
        if kind != "xid" or not number.isascii() or not number.isdigit() or int(number) > MAX_XID:
            raise _bad(value, entry, "expected xid:N (N a whole number, e.g. xid:79) or gpu-lost")
        # As the real driver's AddOrUpdateTaint: one xid taint per device, the later XID wins.
        faults[name] = DeviceFault(int(number), current.lost)
    return faults


def _bad(value: str, entry: str, expected: str) -> DeviceFaultError:
    return DeviceFaultError(f"annotation {ANNOTATION}: {value!r}: entry {entry!r}: {expected}")
