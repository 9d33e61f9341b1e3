"""The DRA drivers the runtime (fakeplugin.runtime) hosts, one module or package each, implementing
runtime.driver.Driver:

- `gpu`: gpu.nvidia.com, NVIDIA's GPU driver, over the publish (inventory → devices → slices) and
  prepare (claim → checkpoint, CDI spec, nvidia-smi data) cores.
- `computedomain`: compute-domain.nvidia.com, the kubelet plugin of NVIDIA's ComputeDomains (IMEX channels
  and daemons), with its own API client for ComputeDomains, cliques and node labels (docs/compute-domains.md).
"""
