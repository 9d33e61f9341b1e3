"""gpu.nvidia.com, NVIDIA's GPU driver (`cmd/gpu-kubelet-plugin/` of NVIDIA's DRA driver repository), on the
runtime: its kubelet plugin and everything only it is made of.

plugin.py   GpuDriver and GpuNode: the runtime's Driver and NodePlugin (a node's NodeDevices and Preparer)
labeller.py the GPU Operator's labels kept on the plugin's own Node (serve --gpu-operator-labels)
publish/    what a node publishes: inventory entry → GPU devices → ResourceSlices; DeviceClasses; Karpenter's
            instance types (pure, but NodeDevices, which follows the inventory file)
prepare/    a claim → checkpoint, CDI spec and fake nvidia-smi data on the host (cdispec, smi, checkpoint,
            opaqueconfig, preparer)

What other packages use of it is exported here, and nothing else of it is imported outside this folder
(tests/test_layers.py). `nvmldata` (the NVML descriptions' layout, for telemetry's live values) loads on first
use: only a plugin given the NVML library needs it (tests/test_serve_imports.py).
"""

from types import ModuleType

from fakeplugin.drivers.gpu.plugin import GpuDriver
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.drivers.gpu.publish.instancetypes import instance_types
from fakeplugin.drivers.gpu.publish.node import node_devices, node_slices
from fakeplugin.drivers.gpu.publish.nodelabels import (
    OWNED_ANNOTATION,
    gpu_node_labels,
    operator_labels,
    owned_labels_patch,
)
from fakeplugin.drivers.gpu.publish.slices import SPLIT_COUNTERS_SINCE

__all__ = [
    "OWNED_ANNOTATION",
    "SPLIT_COUNTERS_SINCE",
    "GpuDriver",
    "device_classes",
    "gpu_node_labels",
    "instance_types",
    "node_devices",
    "node_slices",
    "nvmldata",
    "operator_labels",
    "owned_labels_patch",
    "smi",
]


def __getattr__(name: str) -> ModuleType:
    if name == "nvmldata":
        from fakeplugin.drivers.gpu.prepare import nvmldata

        return nvmldata
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
