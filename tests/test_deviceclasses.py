"""DeviceClasses (publish.deviceclasses): the chart's exact CEL, and the naming rule for other drivers."""

from __future__ import annotations

import pytest

from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.resourceslices import check_driver_name


def summary(driver: str | None = None) -> list[tuple[str, str, str | None]]:
    classes = device_classes(driver) if driver else device_classes()
    assert all(c["apiVersion"] == "resource.k8s.io/v1" and c["kind"] == "DeviceClass" for c in classes)
    return [
        (
            c["metadata"]["name"],
            c["spec"]["selectors"][0]["cel"]["expression"],
            c["spec"].get("extendedResourceName"),
        )
        for c in classes
    ]


def test_real_chart_classes() -> None:
    assert summary() == [
        (
            "gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
            "nvidia.com/gpu",
        ),
        (
            "mig.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
            None,
        ),
        (
            "vfio.gpu.nvidia.com",
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'",
            None,
        ),
    ]


def test_other_driver_names_follow_the_rule() -> None:
    d = "gpu.fake.nvidia.com"
    assert summary(d) == [
        (d, f"device.driver == '{d}' && device.attributes['{d}'].type == 'gpu'", "fake.nvidia.com/gpu"),
        ("mig.fake.nvidia.com", f"device.driver == '{d}' && device.attributes['{d}'].type == 'mig'", None),
        (
            "vfio.gpu.fake.nvidia.com",
            f"device.driver == '{d}' && device.attributes['{d}'].type == 'vfio'",
            None,
        ),
    ]
    assert [name for name, _, _ in summary("fake.example.com")] == [
        "fake.example.com",
        "mig.fake.example.com",
        "vfio.fake.example.com",
    ]
    assert summary("fake.example.com")[0][2] == "fake.example.com/gpu"


@pytest.mark.parametrize("driver", ["GPU.nvidia.com", "gpu_nvidia.com", "", "a" * 60 + ".com", "-gpu.com"])
def test_invalid_driver_names(driver: str) -> None:
    with pytest.raises(ValueError, match="invalid driver name"):
        check_driver_name(driver)
    with pytest.raises(ValueError, match="invalid driver name"):
        device_classes(driver)
