"""The inventory: one YAML file describing the GPUs of every node, everyone's input (the plugin runtime, the
GPU and ComputeDomain drivers, the fleet, the local cluster, `render` and `validate`).

schema.py  the file's schema: node entries, GPU entries, MIG layouts, bounds, every problem with its field
           path (`InventoryError`) (pure)
file.py    `InventoryFile`: the file as a running process follows it, re-read when its content changes
"""
