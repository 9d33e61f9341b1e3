"""gpu.nvidia.com's publish path: inventory (fakeplugin.inventory) → this node's devices → ResourceSlices
(the runtime's SlicePublisher, runtime.publisher, puts them on the API server). MIG's names, placements,
counters and UUIDs are fakeplugin.mig.

devices.py    inventory entry + node name → GpuDevice list (deterministic UUIDs, bus IDs; MIG) (pure)
node.py       NodeDevices: one node's devices and desired slices, reloaded when the file changes
slices.py     devices → ResourceSlice objects, split and pool rules (pure)
deviceclasses.py  the chart's DeviceClasses with the real CEL (pure)
devicefaults.py  a Node's device-faults annotation → taints and health (pure)
"""
