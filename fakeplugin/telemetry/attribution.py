"""Who uses which GPU series: dcgm-exporter's DRA attribution (pure), per release (telemetry.exporters).

NVIDIA/dcgm-exporter `internal/pkg/transformation/kubernetes.go` `toDeviceToPodsDRA`, `Process`; `dra.go`:
every container's claim devices of driver gpu.nvidia.com (hard-coded upstream, `DRAGPUDriverName`) are
mapped through the ResourceSlices to a key, one pod+container per key (the first claim device wins); a
series whose ID (`GetIDOfType`, default `gpu-uuid`: the UUID; a GPU instance's series `<gpu>-<GPU_I_ID>`)
has entries is replaced by one copy per entry with `pod`, `namespace`, `container`, `dra_claim_name`,
`dra_claim_namespace`, `dra_driver_name`, `dra_pool_name`, `dra_device_name` (a MIG device adds
`dra_mig_profile`, `dra_mig_device_uuid`), and from 4.6.1-4.8.4 with --kubernetes-enable-pod-uid `pod_uid`.
The key of a GPU is its `uuid`; of a MIG device, in 4.5.3-4.8.2 its `parentUUID` (whose GPU has no series
in flex mode, so nothing is attributed: dcgm-exporter #714), from 4.6.0-4.8.3 its GPU instance's series ID
(`draMappingKey`), a MIG device without a UUID attributing nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fakeplugin.model import GpuDevice
from fakeplugin.telemetry.exporters import POD_UID_LABEL, ExporterRelease

DRA_GPU_DRIVER = "gpu.nvidia.com"  # transformation/const.go DRAGPUDriverName


@dataclass(frozen=True)
class Use:
    """One container's use of one device through a claim: a PodResources `List` entry (a container's
    dynamic resource's claim resource), from the kubelet or derived from the claim and its pods;
    `pod_uid` the pod's metadata.uid as the API gives it ("" when unread)."""

    pod: str
    namespace: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str
    pod_uid: str = ""


def dra_attribution(
    devices: Sequence[GpuDevice],
    uses: Sequence[Use],
    hostname: str,
    release: ExporterRelease,
    instance_key: Callable[[GpuDevice], str],
    *,
    pod_uid: bool = False,
) -> dict[str, list[dict[str, str]]]:
    """Series ID → attribute sets, one per pod+container; `instance_key`: a MIG device's GPU instance's
    series ID; `pod_uid`: the exporter's --kubernetes-enable-pod-uid."""
    by_name = {d.name: d for d in devices}
    out: dict[str, list[dict[str, str]]] = {}
    seen: dict[str, set[tuple[str, str, str]]] = {}
    for use in uses:
        device = by_name.get(use.device)
        if use.driver != DRA_GPU_DRIVER or device is None or use.pool != hostname:
            continue  # the exporter knows only gpu.nvidia.com slices; ours are the node's pool
        key = _key(device, release, instance_key)
        if not key:
            continue
        who = (use.pod, use.namespace, use.container)
        if who in seen.setdefault(key, set()):
            continue
        seen[key].add(who)
        attributes = {
            "pod": use.pod,
            "namespace": use.namespace,
            "container": use.container,
            "dra_claim_name": use.claim_name,
            "dra_claim_namespace": use.claim_namespace,
            "dra_driver_name": use.driver,
            "dra_pool_name": use.pool,
            "dra_device_name": use.device,
        }
        if device.mig is not None:
            attributes |= {"dra_mig_profile": device.mig.profile, "dra_mig_device_uuid": device.uuid}
        if pod_uid and release.dra_pod_uid:
            attributes[POD_UID_LABEL] = use.pod_uid
        out.setdefault(key, []).append(attributes)
    return out


def _key(device: GpuDevice, release: ExporterRelease, instance_key: Callable[[GpuDevice], str]) -> str:
    if device.mig is None:
        return device.uuid
    if not release.mig_instance_attribution:
        return device.parent_uuid or ""
    return instance_key(device) if device.uuid else ""
