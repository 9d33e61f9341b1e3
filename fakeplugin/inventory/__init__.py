"""The inventory: one YAML file describing the GPUs of every node, everyone's input (the plugin runtime, the
GPU and ComputeDomain drivers, the fleet, the local cluster, `render` and `validate`).

fields.py  the table of every field (the reference docs/inventory.md repeats), defaults, upper bounds
model.py   the entries as the program holds them: Inventory, NodeEntry, GpuEntry, InstanceType, MigInstance
parse.py   load_inventory, parse_inventory: the file read and checked, every problem with its field path
           (`InventoryError`); a node entry is nodes.py's, a GPU entry gpus.py's (pure, but the file's read)
file.py    `InventoryFile`: the file as a running process follows it, re-read when its content changes

What other packages use of the file's reading is exported here, so they need not know which module holds
it; the bounds and the table are `fields`', for the tests and docs that check them.
"""

from fakeplugin.inventory.fields import INSTANCE_TYPE_LABEL
from fakeplugin.inventory.model import GpuEntry, Inventory, NodeEntry
from fakeplugin.inventory.parse import InventoryError, load_inventory, parse_inventory

__all__ = [
    "INSTANCE_TYPE_LABEL",
    "GpuEntry",
    "Inventory",
    "InventoryError",
    "NodeEntry",
    "load_inventory",
    "parse_inventory",
]
