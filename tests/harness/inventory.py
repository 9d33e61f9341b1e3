"""One node's devices from inventory GPU entries, as the publisher derives them (for MIG and shares tests).

`inventory(*gpus)`: an inventory of node `n` with these `gpus` entries (driver 580.159.04, as the captured
H200 host), read as from inv.yaml; `devices(*gpus, dynamic=)`: that node's devices, with DynamicMIG or not.
"""

from __future__ import annotations

from typing import Any

from fakeplugin.drivers.gpu.publish.devices import devices_for_node
from fakeplugin.inventory import Inventory, parse_inventory
from fakeplugin.model import GpuDevice


def inventory(*gpus: dict[str, Any]) -> Inventory:
    return parse_inventory(
        {
            "driverVersion": "580.159.04",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": "n", "gpus": list(gpus)}],
        },
        source="inv.yaml",
    )


def devices(*gpus: dict[str, Any], dynamic: bool = False) -> list[GpuDevice]:
    inv = inventory(*gpus)
    return devices_for_node(inv, inv.nodes[0], "n", dynamic_mig=dynamic)
