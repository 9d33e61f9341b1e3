"""The real driver's feature gates (nvidia-driver-shape.md §10), parsed from "A=true,B=false"."""

from __future__ import annotations

# name -> default, as in NVIDIA's driver (v25.12 / v0.4).
KNOWN: dict[str, bool] = {
    "TimeSlicingSettings": False,
    "MPSSupport": False,
    "IMEXDaemonsWithDNSNames": True,
    "PassthroughSupport": False,
    "DynamicMIG": False,
    "NVMLDeviceHealthCheck": False,
    "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True,
    "DeviceMetadata": False,
}


def parse(text: str | None) -> dict[str, bool]:
    """All known gates with their values; unknown names or non-boolean values are an error."""
    gates = dict(KNOWN)
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if name not in KNOWN:
            raise ValueError(
                f"--feature-gates: unknown feature gate {name!r}; known: {', '.join(sorted(KNOWN))}"
            )
        if not sep or value.strip().lower() not in ("true", "false"):
            raise ValueError(f"--feature-gates: {item!r}: expected {name}=true or {name}=false")
        gates[name] = value.strip().lower() == "true"
    return gates
