"""What is emulated, decided once at start and handed down: one immutable value.

    --driver-release (else the inventory's driverRelease) ─▶ release ─▶ --feature-gates, checked as that
    release checks them ─▶ --consumable-shares, checked against both ─▶ the release as it publishes with
    those gates (DriverRelease.with_gates)

`serve`, `fleet` and `render` build it here and nowhere else; like a real driver's version and flags it
does not change under a running plugin (an inventory edit of driverRelease takes effect on restart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fakeplugin import DEFAULT_DRIVER_NAME, consumableshares, featuregates, releases
from fakeplugin.releases import DriverRelease


@dataclass(frozen=True)
class Emulation:
    driver_name: str
    release: DriverRelease  # with its gates applied
    feature_gates: Mapping[str, bool]  # every gate of the release, with its value
    consumable_shares: str = consumableshares.DISABLED
    device_nodes: bool = False  # CDI specs inject /dev/nvidia* character devices (prepare.cdispec)

    @property
    def dynamic_mig(self) -> bool:
        return self.feature_gates.get("DynamicMIG", False)

    @property
    def passthrough(self) -> bool:
        return self.feature_gates.get("PassthroughSupport", False)

    def describe(self) -> str:
        """One log line's worth: the release, its commit and libraries, the gates turned on."""
        base = releases.get(self.release.name).feature_gates
        enabled = sorted(g for g, on in self.feature_gates.items() if on and not base[g])
        shares = self.consumable_shares
        return (
            f"{self.driver_name}, emulating NVIDIA driver {self.release.tag or self.release.name} "
            f"(commit {self.release.commit[:8] or 'unknown'}, k8s libraries {self.release.k8s_libs})"
            + (f", feature gates: {', '.join(enabled)}" if enabled else "")
            + (f", consumable shares: {shares}" if shares != consumableshares.DISABLED else "")
        )


def emulation(
    *,
    release: str,
    driver_name: str = DEFAULT_DRIVER_NAME,
    feature_gates: str = "",
    consumable_shares: str = "",
    device_nodes: bool = False,
) -> Emulation:
    """The value for these flags; `release`: a release name or tag (the flag, else the inventory's
    driverRelease; "" is the default release). ValueError names the flag at fault."""
    base = releases.get(release or None)
    gates = featuregates.parse(feature_gates, base)
    shares = consumableshares.parse(consumable_shares, gates, base)
    return Emulation(
        driver_name=driver_name,
        release=base.with_gates(gates),  # DRAListTypeAttributes: the form of numaNode
        feature_gates=MappingProxyType(gates),
        consumable_shares=shares,
        device_nodes=device_nodes,
    )
