"""fakeplugin: a hardware-free stand-in for NVIDIA's Kubernetes DRA GPU driver (gpu.nvidia.com)."""

__version__ = "0.1.0"

DEFAULT_DRIVER_NAME = "gpu.nvidia.com"
