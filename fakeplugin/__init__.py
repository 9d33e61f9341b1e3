"""fakeplugin: a hardware-free stand-in for NVIDIA's Kubernetes DRA GPU driver (gpu.nvidia.com)."""

# The one version of fakeplugin: pyproject.toml reads it; tests/test_version.py holds the chart, the image and
# CHANGELOG.md to it (docs/support.md: what a version promises).
__version__ = "0.2.0"

DEFAULT_DRIVER_NAME = "gpu.nvidia.com"
