"""The DRA drivers the runtime (fakeplugin.runtime) hosts, one module or package each, implementing
runtime.driver.Driver:

- `gpu`: gpu.nvidia.com, NVIDIA's GPU driver, over the publish (inventory → devices → slices) and
  prepare (claim → checkpoint, CDI spec, nvidia-smi data) cores.
"""
