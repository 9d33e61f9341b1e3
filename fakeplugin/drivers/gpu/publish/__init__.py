"""gpu.nvidia.com's publish path: inventory (fakeplugin.inventory) → this node's devices → ResourceSlices
(the runtime's SlicePublisher, runtime.publisher, puts them on the API server). MIG's names, placements,
counters and UUIDs are fakeplugin.mig; the faults that become taints are fakeplugin.faults.

devices.py        inventory entry + node name → GpuDevice list (pure: UUIDs, bus IDs, NUMA, MIG)
node.py           NodeDevices: one node's devices and desired slices, reloaded when the file changes
slices.py         devices → a pool's contents (pure; fakeplugin.resourceslices wraps them)
deviceclasses.py  the chart's DeviceClasses with the real CEL (pure)
instancetypes.py  the inventory's instanceType entries → Karpenter's kwok instance types (pure)
nodelabels.py     inventory entry → the GPU Operator's node labels (GPU Feature Discovery's and its own; pure)
"""
