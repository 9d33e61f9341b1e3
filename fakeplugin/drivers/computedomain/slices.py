"""What compute-domain.nvidia.com's kubelet plugin publishes on a node (pure).

One pool named after the node, one slice, exactly two devices and no capacity (`cmd/compute-domain-
kubelet-plugin/deviceinfo.go` GetDevice; `driver.go` computeDomainPublishedDevices): the plugin knows
2048 IMEX channels (`nvlib.go` getImexChannelCount) but publishes only channel 0, and one daemon device.
Every claim for `channel-0` is a claim for "the ComputeDomain's channel on this node"; which channels the
container gets is the opaque config's allocationMode (fakeplugin.drivers.computedomain.cdispec).

Upstream builds the list from a Go map, so the order of the two devices varies between its restarts [U];
ours is fixed: channel, then daemon. The slice's name and pool fields come from the same resourceslice
controller as gpu.nvidia.com's (fakeplugin.resourceslices, per release).

With `binding_conditions` (opt-in, beyond every NVIDIA release; docs/compute-domains.md, *Binding
conditions*) the channel device also carries KEP-5007's `bindingConditions` / `bindingFailureConditions`
(kubernetes/kubernetes v1.37.2 `staging/src/k8s.io/api/resource/v1/types.go` Device; both lists or
neither, `pkg/apis/resource/validation/validation.go` validateDeviceBindingParameters), which our
ComputeDomain controller answers (drivers.computedomain.controller.binding). No `bindsToNode`: the slice
is the node's own, so the allocation's node selector already names the node.
"""

from __future__ import annotations

from typing import Any

from fakeplugin.apis import computedomain as api
from fakeplugin.releases import DriverRelease
from fakeplugin.resourceslices import pool_slices, split_devices

CHANNEL = "channel"  # ComputeDomainChannelType (types.go)
DAEMON = "daemon"  # ComputeDomainDaemonType
MAX_CHANNELS = 2048  # nvlib.go getImexChannelCount: fixed, not read from /proc/driver/nvidia/params


def device_name(device_type: str, device_id: int = 0) -> str:
    """`channel-0`, `daemon-0` (CanonicalName: `<type>-<id>`)."""
    return f"{device_type}-{device_id}"


def published_devices(*, binding_conditions: bool = False) -> list[dict[str, Any]]:
    """The two devices, in API shape: attributes `type` (string) and `id` (int), nothing else; with
    `binding_conditions` the channel's binding and binding-failure conditions."""
    devices: list[dict[str, Any]] = [
        {"name": device_name(t), "attributes": {"type": {"string": t}, "id": {"int": 0}}}
        for t in (CHANNEL, DAEMON)
    ]
    if binding_conditions:
        devices[0] |= {
            "bindingConditions": [api.READY_CONDITION],
            "bindingFailureConditions": [api.FAILED_CONDITION],
        }
    return devices


def node_slices(
    node_name: str,
    *,
    node_uid: str,
    driver: str,
    release: DriverRelease,
    publishes: bool,
    binding_conditions: bool = False,
) -> list[dict[str, Any]]:
    """The node's pool; empty when the node does not run the plugin (`publishes`: its inventory entry has
    GPUs, where NVIDIA's chart schedules the plugin)."""
    if not publishes:
        return []
    return pool_slices(
        [
            {"devices": chunk}
            for chunk in split_devices(published_devices(binding_conditions=binding_conditions))
        ],
        driver=driver,
        node_name=node_name,
        node_uid=node_uid,
        release=release,
    )
