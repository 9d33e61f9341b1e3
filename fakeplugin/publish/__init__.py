"""gpu.nvidia.com's publish path: inventory → this node's devices → ResourceSlices (the runtime's
SlicePublisher, runtime.publisher, puts them on the API server).

inventory.py  the inventory file: schema, bounds, every problem with its field path (pure)
devices.py    inventory entry + node name → GpuDevice list (deterministic UUIDs, bus IDs; MIG) (pure)
mig.py        MIG rules: canonical names, placements, counters, MIG UUIDs (pure)
node.py       NodeDevices: one node's devices and desired slices, reloaded when the file changes
slices.py     devices → ResourceSlice objects, split and pool rules (pure)
deviceclasses.py  the chart's DeviceClasses with the real CEL (pure)
devicefaults.py  a Node's device-faults annotation → taints and health (pure)
"""
