"""A GPU's NVLink fabric health as DCGM reports it (pure): DCGM_FI_DEV_FABRIC_HEALTH_MASK (174) and
DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY (175), which dcgm-exporter 4.6.1-4.8.4 adds as opt-in fields.

DCGM takes both from NVML's GPU fabric info (nvmlGpuFabricInfo_v3_t `healthMask`, `healthSummary`):
dcgm_fields.h says to read the mask with `DCGM_GPU_FABRIC_HEALTH_GET`, NVML's `NVML_GPU_FABRIC_HEALTH_GET`.
The encoding is nvml.h's (NVIDIA/go-nvml 2f9e261 `gen/nvml/nvml.h`): the summary one of
`NVML_GPU_FABRIC_HEALTH_SUMMARY_*` (NOT_SUPPORTED 0, HEALTHY 1, UNHEALTHY 2, LIMITED_CAPACITY 3); the mask
a field per row at `NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_*`, each `*_NOT_SUPPORTED` 0, `*_TRUE` 1, `*_FALSE` 2
(DEGRADED_BW at 0, ROUTE_RECOVERY 2, ROUTE_UNHEALTHY 4, ACCESS_TIMEOUT_RECOVERY 6, PARTITION_ASSIGNED 12);
INCORRECT_CONFIGURATION at 8, 4 bits wide: NOT_SUPPORTED 0, NONE 1, then the reasons 2..8.

The rows are those the fake nvidia-smi prints (model.FABRIC_HEALTH_ROWS, a profile's `smi.fabric.health`
from captures, drivers/gpu/prepare/smi.py `fabric_values`), read back into NVML's numbers: "Full"
bandwidth is not degraded (FALSE), "Degraded" is TRUE; "True"/"False" as they say; N/A is NOT_SUPPORTED.
[U] A GPU whose registration has not completed, or failed (the node's fabric-state fault,
faults/fabricfaults.py), prints every health row N/A, so reports 0 and 0 here; DCGM's values for such a
GPU are not verified against hardware.
"""

from __future__ import annotations

from collections.abc import Mapping

from fakeplugin.drivers.gpu import smi
from fakeplugin.model import GpuDevice

MASK_FIELD_ID = 174  # DCGM_FI_DEV_FABRIC_HEALTH_MASK
SUMMARY_FIELD_ID = 175  # DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY
SUMMARY = {"Healthy": 1, "Unhealthy": 2, "Limited Capacity": 3}  # NVML_GPU_FABRIC_HEALTH_SUMMARY_*
_BOOLEAN = {"True": 1, "False": 2}  # NVML_GPU_FABRIC_HEALTH_MASK_<row>_TRUE, _FALSE
# fabric_values' row → (NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_<row>, nvidia-smi's text → the row's value).
MASK_ROWS: Mapping[str, tuple[int, Mapping[str, int]]] = {
    "bandwidth": (0, {"Degraded": 1, "Full": 2}),
    "route_recovery_in_progress": (2, _BOOLEAN),
    "route_unhealthy": (4, _BOOLEAN),
    "access_timeout_recovery": (6, _BOOLEAN),
    "incorrect_configuration": (8, {"None": 1}),  # [U] the reasons' texts (values 2..8) are not captured
    "partition_assigned": (12, _BOOLEAN),
}


def fabric_health(device: GpuDevice) -> dict[int, int]:
    """Field ID → value for a GPU whose fabric info NVML supports (Board.reported_fabric); {} otherwise
    (DCGM blank: no series)."""
    if device.board.reported_fabric is None:
        return {}
    rows = smi.fabric_values(device.board)
    mask = 0
    for row, (shift, values) in MASK_ROWS.items():
        mask |= values.get(rows[f"fabric_health_{row}"], 0) << shift
    return {MASK_FIELD_ID: mask, SUMMARY_FIELD_ID: SUMMARY.get(rows["fabric_health_summary"], 0)}
