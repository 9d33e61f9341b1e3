"""The DeviceClasses NVIDIA's chart installs with `resources.computeDomains.enabled` (pure), with its CEL
(`deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-compute-domain-default-channel.yaml`,
`deviceclass-compute-domain-daemon.yaml`; the daemon class is left out in host-managed IMEX mode, which
fakeplugin does not emulate).

Names follow the driver name so the fake can run beside the real driver: for `compute-domain.<rest>` the
classes are `compute-domain-default-channel.<rest>` and `compute-domain-daemon.<rest>` (`nvidia.com` for
the real name), as fakeplugin.drivers.gpu.publish.deviceclasses does for gpu.nvidia.com.
"""

from __future__ import annotations

from typing import Any

from fakeplugin.apis.computedomain import DAEMON_CLASS, DEFAULT_CHANNEL_CLASS, DRIVER_NAME, device_class
from fakeplugin.drivers.computedomain.slices import CHANNEL, DAEMON
from fakeplugin.resourceslices import API_VERSION, check_driver_name


def class_names(driver: str = DRIVER_NAME) -> dict[str, str]:
    """Device type → DeviceClass name."""
    return {CHANNEL: device_class(DEFAULT_CHANNEL_CLASS, driver), DAEMON: device_class(DAEMON_CLASS, driver)}


def device_classes(driver: str = DRIVER_NAME) -> list[dict[str, Any]]:
    check_driver_name(driver)
    attrs = f"device.attributes['{driver}']"
    expressions = {
        CHANNEL: f"device.driver == '{driver}' && {attrs}.type == 'channel' && {attrs}.id == 0",
        DAEMON: f"device.driver == '{driver}' && {attrs}.type == 'daemon'",
    }
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expressions[device_type]}}]},
        }
        for device_type, name in class_names(driver).items()
    ]
