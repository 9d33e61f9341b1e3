"""The DRA drivers, one home each, as NVIDIA's repository has them (docs/architecture.md): everything of a
driver is in its folder, and other packages enter it only through its face (its __init__'s exports;
tests/test_layers.py).

- `gpu/`: gpu.nvidia.com, NVIDIA's GPU driver: its kubelet plugin (`plugin.py`), what a node publishes
  (`publish/`: inventory → devices → slices) and how a claim is prepared (`prepare/`: checkpoint, CDI spec,
  nvidia-smi data).
- `computedomain/`: compute-domain.nvidia.com, NVIDIA's ComputeDomains: its kubelet plugin, its
  controller (`controller/`) and its IMEX daemon's Kubernetes part (`daemon.py`) (docs/compute-domains.md).

Both kubelet plugins implement runtime.driver.Driver and run on the runtime (fakeplugin.runtime).
"""
