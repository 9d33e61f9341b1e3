"""The first step of the Kubernetes JSON serializer for an object of NVIDIA's scheme (the opaque configs
of both drivers, gpu.nvidia.com's and compute-domain.nvidia.com's): its apiVersion and kind, refused with
the serializer's own texts (k8s.io/apimachinery runtime/serializer/json, `couldn't get version/kind`,
`Object 'Kind' is missing`, `no kind ... is registered`). Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

# The GPU driver's kinds of NVIDIA's scheme (resource.nvidia.com/v1beta1; the ComputeDomain kinds are in
# fakeplugin.apis.computedomain), and the scheme's name in the serializer's texts: both drivers' configs
# know every kind of the scheme, their own and the other driver's.
GPU_CONFIG = "GpuConfig"
MIG_DEVICE_CONFIG = "MigDeviceConfig"
VFIO_DEVICE_CONFIG = "VfioDeviceConfig"
SCHEME_NAME = "sigs.k8s.io/dra-driver-nvidia-gpu/api/nvidia.com/resource/v1beta1/api.go"


class DecodeError(ValueError):
    """What the serializer reports for one parameters object."""


def type_meta(parameters: Any) -> tuple[str, str, str]:
    """(group, version, kind) of `parameters`; DecodeError when the serializer cannot tell them."""
    raw = json.dumps(parameters, separators=(",", ":"), ensure_ascii=False)
    if not isinstance(parameters, Mapping):
        raise DecodeError(
            f"couldn't get version/kind; json parse error: json: cannot unmarshal {json_type(parameters)} "
            'into Go value of type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
            'Kind string "json:\\"kind,omitempty\\"" }'
        )
    for key in ("apiVersion", "kind"):
        value = parameters.get(key)
        if value is not None and not isinstance(value, str):
            raise DecodeError(
                f"couldn't get version/kind; json parse error: json: cannot unmarshal {json_type(value)} "
                f"into Go struct field .{key} of type string"
            )
    api_version, kind = parameters.get("apiVersion") or "", parameters.get("kind") or ""
    if api_version.count("/") > 1:
        raise DecodeError(f"unexpected GroupVersion string: {api_version}")
    group, _, version = api_version.rpartition("/")
    if not kind:
        raise DecodeError(f"Object 'Kind' is missing in '{raw}'")
    if not version:
        raise DecodeError(f"Object 'apiVersion' is missing in '{raw}'")
    return group, version, kind


def not_registered(group: str, version: str, kind: str, scheme: str) -> DecodeError:
    """The serializer's answer for a kind its scheme does not hold."""
    gv = f"{group}/{version}" if group else version
    return DecodeError(f'no kind "{kind}" is registered for version "{gv}" in scheme "{scheme}"')


def json_type(value: Any) -> str:
    """The JSON type Go's decoder names for `value`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
