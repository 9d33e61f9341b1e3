"""The plugin's start-up read of its node's NVLink fabric: the clique ID, or the refusal to start.

As `cmd/compute-domain-kubelet-plugin/nvlib.go` getCliqueID does it (kubernetes-sigs/dra-driver-nvidia-gpu
v25.12.0, v0.4.1 and main 95932046), over the node's GPUs in NVML order, from their fabric info (the
inventory's `nodes[].fabric`, else their model's outside a multi-node domain: Board.reported_fabric; with
the node's `fakeplugin.dev/fabric-state` fault applied: fakeplugin.faults.fabricfaults):

- gate CrashOnNVLinkFabricErrors on (the default of every emulated release; getCliqueIDStrict): a GPU whose
  registration is not Completed stops the plugin (`NVLink fabric not attached (device <i>/<uuid>):
  state=<n>, refusing to start`), as does a Completed one with an error status (`NVLink fabric
  registration error (device <i>/<uuid>): status=<nvmlErrorString>, refusing to start`); the first such
  GPU is the error. A zero ClusterUUID is no fabric (`no-clique fallback: cluster UUID is zero, ...`);
- gate off (getCliqueIDLegacy, go-nvlib IsFabricAttached): such a GPU is "not attached" and adds nothing
  (`no-clique fallback: fabric not attached (device <i>/<uuid>)`); with no GPU attached the clique ID is
  "" (channels get no device node, the daemon idles).

The error is wrapped as upstream's start does (`error creating driver: ...`; main also wraps it in
`unable to create computedomain manager: `). Read once, when the plugin starts, as upstream: a fault set
later changes nothing until the plugin restarts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fakeplugin.faults import fabricfaults
from fakeplugin.faults.fabricfaults import FabricFault
from fakeplugin.model import ZERO_UUID, Fabric, GpuDevice

log = logging.getLogger(__name__)

GATE = "CrashOnNVLinkFabricErrors"
# Releases whose NewDeviceState gets the clique ID through NewComputeDomainManager (main: device_state.go
# `unable to create computedomain manager: %v`); v25.12.0 and v0.4.1 call getCliqueID directly.
MANAGER_WRAPS = frozenset({"0.5.0-dev", "0.5.0"})  # 0.5.0: main's code, the tag unverified


class FabricError(Exception):
    """The plugin refuses to start: the message is upstream's whole error chain."""


@dataclass(frozen=True)
class Gpu:
    """A physical GPU as NVML enumerates it: its index, UUID and fabric info (None: not supported or
    unknown)."""

    index: int
    uuid: str
    fabric: Fabric | None


def node_gpus(devices: Sequence[GpuDevice], faults: Mapping[str, FabricFault]) -> list[Gpu]:
    """The node's physical GPUs in NVML order, from its published devices (a MIG device stands for its
    parent), with the fabric faults applied."""
    gpus: dict[int, Gpu] = {}
    for d in fabricfaults.with_fabric_faults(devices, faults):
        uuid = d.uuid if d.mig is None else (d.parent_uuid or "")
        gpus.setdefault(d.index, Gpu(d.index, uuid, d.board.reported_fabric))
    return [gpus[i] for i in sorted(gpus)]


def clique_id(gpus: Sequence[Gpu], *, strict: bool) -> str:
    """`<clusterUUID>.<clique>` of the node's attached GPUs, "" with none; FabricError (strict only) when a
    GPU's registration is not Completed/Success."""
    ids: set[str] = set()
    try:
        for gpu in gpus:
            found = _strict(gpu) if strict else _legacy(gpu)
            if found:
                log.info("identified fabric clique UUID/ID (device %d/%s): %s", gpu.index, gpu.uuid, found)
                ids.add(found)
    except FabricError as e:
        raise FabricError(f"error getting fabric information from one or more devices: {e}") from None
    # One fabric per inventory entry: every attached GPU of the node reports the same clique.
    return ids.pop() if ids else ""


def start_error(error: FabricError, release: str) -> FabricError:
    """The error as the plugin's start reports it (main.go RunPlugin, device_state.go NewDeviceState)."""
    manager = "unable to create computedomain manager: " if release in MANAGER_WRAPS else ""
    return FabricError(f"error creating driver: {manager}error getting cliqueID: {error}")


def _legacy(gpu: Gpu) -> str:
    f = gpu.fabric
    if f is None or not f.registered or f.cluster_uuid == ZERO_UUID:
        log.info("no-clique fallback: fabric not attached (device %d/%s)", gpu.index, gpu.uuid)
        return ""
    return f.clique_id


def _strict(gpu: Gpu) -> str:
    f = gpu.fabric
    if f is not None and f.state != "Completed":
        state = fabricfaults.state_number(f.state)
        raise FabricError(
            f"NVLink fabric not attached (device {gpu.index}/{gpu.uuid}): state={state}, refusing to start"
        )
    if f is not None and f.status != "Success":
        raise FabricError(
            f"NVLink fabric registration error (device {gpu.index}/{gpu.uuid}): status={f.status}, "
            "refusing to start"
        )
    if f is None or f.cluster_uuid == ZERO_UUID:
        # A GPU whose fabric info is not supported or unknown adds no clique either.
        log.info(
            "no-clique fallback: cluster UUID is zero, treat as fabric not attached (device %d/%s)",
            gpu.index,
            gpu.uuid,
        )
        return ""
    return f.clique_id
