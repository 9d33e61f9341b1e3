"""The DeviceClasses NVIDIA's chart installs (GPUs on, compute domains off), with its exact CEL (pure).

Names follow the driver name so the fake can run next to the real driver: for driver `gpu.<rest>`
(or any other `<rest>`, used whole) the classes are

| class | default driver | driver `gpu.fake.nvidia.com` |
| --- | --- | --- |
| `<driver>` | `gpu.nvidia.com` | `gpu.fake.nvidia.com` |
| `mig.<rest>` | `mig.nvidia.com` | `mig.fake.nvidia.com` |
| `vfio.<driver>` | `vfio.gpu.nvidia.com` | `vfio.gpu.fake.nvidia.com` |

and the GPU class maps the extended resource `<rest>/gpu` (`nvidia.com/gpu` for the real name,
`fake.nvidia.com/gpu` for the example), so two drivers never claim the same extended resource name.
"""

from __future__ import annotations

from typing import Any

from fakeplugin import DEFAULT_DRIVER_NAME, releases
from fakeplugin.releases import DriverRelease
from fakeplugin.resourceslices import API_VERSION, check_driver_name


def _rest(driver: str) -> str:
    return driver.removeprefix("gpu.")


def device_classes(
    driver: str = DEFAULT_DRIVER_NAME, release: DriverRelease | None = None
) -> list[dict[str, Any]]:
    """DeviceClasses for GPUs, MIG devices and VFIO passthrough, selecting this driver's devices: those
    the chart of `release` (default: the default release) installs."""
    check_driver_name(driver)
    names = {"gpu": driver, "mig": f"mig.{_rest(driver)}", "vfio": f"vfio.{driver}"}
    classes = []
    for device_type in (release or releases.get(None)).device_classes:
        name = names[device_type]
        spec: dict[str, Any] = {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{driver}' && "
                        f"device.attributes['{driver}'].type == '{device_type}'"
                    }
                }
            ]
        }
        if device_type == "gpu":
            spec["extendedResourceName"] = f"{_rest(driver)}/gpu"
        classes.append(
            {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}
        )
    return classes
