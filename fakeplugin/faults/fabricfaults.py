"""NVLink fabric faults on demand: a Node's `fakeplugin.dev/fabric-state` annotation, parsed, and the
GPU fabric info NVML then reports for the node's GPUs (pure).

    fakeplugin.dev/fabric-state: "InProgress"                          every GPU of the node
    fakeplugin.dev/fabric-state: "gpu-0=NotStarted,gpu-3=Completed:ERROR_TIMEOUT"

A GPU of a multi-node NVLink fabric (the inventory's `nodes[].fabric`), and one whose model registers
outside such a domain (its profile's `smi.fabric`: CliqueId 0, the zero ClusterUUID; Board.reported_fabric),
reports state Completed, status Success once Fabric Manager registered it. The fault replaces that with
what a GPU reports before or after a failed registration (NVML nvmlGpuFabricInfo_t, nvml.h
`NVML_GPU_FABRIC_STATE_*`):

- `NotStarted` (state 1), `InProgress` (state 2): nvidia-smi prints the state and N/A for Status, CliqueId,
  ClusterUUID and Health (a GB200's "In Progress" report, NVIDIA/gpu-operator#2511, driver 580.159.04;
  [U] "Not Started" by analogy);
- `Completed:<NVML return>` (state 3, the status an error): the registration finished with that error;
  nvidia-smi's Status is NVML's text for it (nvmlErrorString: DCGM `sdk/nvidia/nvml/nvml_error_strings.h`);
  [U] CliqueId and ClusterUUID still printed, Health N/A.

Who reads it: the GPU plugin (the fake nvidia-smi of containers prepared afterwards) and the compute-domain
plugin at its start (fakeplugin.drivers.computedomain.fabric: NVIDIA's startup check of the fabric).
The annotation only changes GPUs that report a fabric (the node's or their model's registration); an
entry naming another GPU (fabric info not supported or unknown) is logged and ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from fakeplugin.model import Fabric, GpuDevice

ANNOTATION = "fakeplugin.dev/fabric-state"
EVERY_GPU = ""  # the key of an entry without DEVICE=
MAX_ENTRIES = 128  # one per GPU of a node (the inventory's bound)

# nvml.h nvmlGpuFabricState_t; text: as nvidia-smi -q prints the state.
_STATES = {"NotStarted": (1, "Not Started"), "InProgress": (2, "In Progress"), "Completed": (3, "Completed")}
# NVML returns a completed registration may report, with nvmlErrorString's text for each.
STATUSES = {
    "ERROR_TIMEOUT": "Timeout",
    "ERROR_UNKNOWN": "Unknown Error",
    "ERROR_NOT_SUPPORTED": "Not Supported",
    "ERROR_NO_PERMISSION": "Insufficient Permissions",
    "ERROR_INSUFFICIENT_RESOURCES": "Insufficient Resources",
    "ERROR_GPU_IS_LOST": "GPU is lost",
    "ERROR_RESET_REQUIRED": "GPU requires reset",
}
NOT_APPLICABLE = "N/A"


class FabricFaultError(ValueError):
    """The node's fabric-state annotation cannot be parsed."""


@dataclass(frozen=True)
class FabricFault:
    """A GPU's fabric registration other than Completed/Success: `state` a key of _STATES, `status` a key
    of STATUSES when the state is Completed, else ""."""

    state: str
    status: str = ""

    @property
    def status_text(self) -> str:
        """nvmlErrorString of the status: what nvidia-smi and upstream's `%v` print."""
        return STATUSES[self.status] if self.status else NOT_APPLICABLE

    def applied(self, fabric: Fabric) -> Fabric:
        """What NVML reports for a GPU of `fabric` with this fault."""
        return replace(fabric, state=_STATES[self.state][1], status=self.status_text)


def parse_fabric_faults(value: str | None) -> dict[str, FabricFault]:
    """Device name (EVERY_GPU for an entry without one) → its fault, from comma-separated `STATE` or
    `DEVICE=STATE` entries; STATE is NotStarted, InProgress or Completed:<NVML error>. FabricFaultError
    names the annotation, the value and the bad entry; whether a name is a GPU of the node is for the
    caller to say."""
    faults: dict[str, FabricFault] = {}
    if value is None or not value.strip():
        return faults
    entries = [e.strip() for e in value.split(",")]
    if len(entries) > MAX_ENTRIES:
        raise FabricFaultError(f"annotation {ANNOTATION}: {len(entries)} entries, at most {MAX_ENTRIES}")
    for entry in entries:
        name, sep, text = entry.rpartition("=")
        if sep and not name.strip():
            raise _bad(value, entry, "expected STATE or DEVICE=STATE, e.g. gpu-0=InProgress")
        name = name.strip()
        if name in faults:
            raise _bad(value, entry, f"{name or 'every GPU'} named twice")
        faults[name] = _fault(value, entry, text.strip())
    return faults


def state_number(text: str) -> int:
    """NVML's nvmlGpuFabricState_t of a state as nvidia-smi prints it (upstream's error text prints it)."""
    return next(number for number, shown in _STATES.values() if shown == text)


def fault_of(faults: Mapping[str, FabricFault], device: str) -> FabricFault | None:
    """The fault of the GPU named `device` (its own entry first, else the node-wide one)."""
    return faults.get(device) or faults.get(EVERY_GPU)


def unknown_devices(faults: Mapping[str, FabricFault], devices: Sequence[GpuDevice]) -> list[str]:
    """The entries' device names that are no GPU of the node reporting a fabric (sorted)."""
    gpus = {f"gpu-{d.minor}" for d in devices if d.board.reported_fabric is not None}
    return sorted(name for name in faults if name != EVERY_GPU and name not in gpus)


def with_fabric_faults(devices: Sequence[GpuDevice], faults: Mapping[str, FabricFault]) -> list[GpuDevice]:
    """`devices` with their boards' fabric as NVML reports it under `faults` (the board's reported_fabric,
    the fault applied, as its `fabric`): a MIG device carries its parent's (gpu-<minor>'s) board, so its
    parent's fault."""
    out = []
    for d in devices:
        fault = fault_of(faults, f"gpu-{d.minor}")
        reported = d.board.reported_fabric
        if fault is None or reported is None:
            out.append(d)
            continue
        out.append(replace(d, board=replace(d.board, fabric=fault.applied(reported))))
    return out


def _fault(value: str, entry: str, text: str) -> FabricFault:
    state, _, status = text.partition(":")
    if state not in _STATES:
        raise _bad(value, entry, f"state {state!r}: expected one of {', '.join(_STATES)}")
    if state == "Completed":
        if status not in STATUSES:
            raise _bad(
                value, entry, f"Completed needs an error status, Completed:<one of {', '.join(STATUSES)}>"
            )
        return FabricFault(state, status)
    if status:
        raise _bad(value, entry, f"{state} has no status (only Completed:<error> does)")
    return FabricFault(state)


def _bad(value: str, entry: str, expected: str) -> FabricFaultError:
    return FabricFaultError(f"annotation {ANNOTATION}: {value!r}: entry {entry!r}: {expected}")
