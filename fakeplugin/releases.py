"""The NVIDIA DRA driver releases fakeplugin emulates, as data: the one place that says how they differ.

A release is picked by `driverRelease:` in the inventory, `render --driver-release`, `serve
--driver-release` (the chart's `driverRelease` value); the default is the newest, 0.5.0. The reference lab
(docs/emulation.md) runs 25.12: examples/seed-lab.yaml says `driverRelease: "25.12"`.

Every field is verified in kubernetes-sigs/dra-driver-nvidia-gpu at the release's tag, or for 0.5.0-dev at a
commit of main (`commit` below); 0.5.0's tag is not in the newest snapshot available here, so its fields are
main's at 95932046 plus the fixes merged before the tag that the public record shows (PR #1326);
docs/driver-releases.md has one row per difference with its source, and
lists what is the same and what fakeplugin does not emulate. Differences that do not show in what
fakeplugin publishes or accepts (compute domains, metrics, chart names) are only in the docs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from fakeplugin.profiles import ARCHITECTURES

# Attributes of a full GPU / MIG device (cmd/gpu-kubelet-plugin/deviceinfo.go `Attributes`, mig.go
# `CommonAttributesMig`): the same keys and types in v25.12.0 and v0.4.1.
GPU_ATTRIBUTES = frozenset(
    {
        "type",
        "uuid",
        "parentUUID",
        "profile",
        "productName",
        "brand",
        "architecture",
        "cudaComputeCapability",
        "driverVersion",
        "cudaDriverVersion",
        "resource.kubernetes.io/pciBusID",
        "resource.kubernetes.io/pcieRoot",
        "addressingMode",
    }
)

# go.mod: v25.12.0 requires go-nvlib v0.9.0, v0.4.1 v0.11.0, main v0.12.0 since 95a1b03f (2026-07-10); Rubin
# (NVML architecture 13) is named from v0.12.0 on (NVIDIA/go-nvlib commit 50f3b9b2). Issue #1462.
_BEFORE_RUBIN = frozenset(ARCHITECTURES) - {"Rubin"}

# Main at 95932046 adds the GPU's NUMA node (PCI sysfs numa_node, omitted when unknown or negative) to full
# GPUs and MIG devices: deviceinfo.go `addNumaNodeAttribute`, called by `GpuInfo.Attributes` and mig.go
# `CommonAttributesMig` (commits 8ce979b5 as dra.net/numaNode, 3b59d66e renamed, 722e388b sysfs only).
NUMA_NODE_ATTRIBUTE = "resource.kubernetes.io/numaNode"

# pkg/featuregates/featuregates.go, name -> default.
_GATES_25_12 = {
    "TimeSlicingSettings": False,
    "MPSSupport": False,
    "IMEXDaemonsWithDNSNames": True,
    "PassthroughSupport": False,
    "DynamicMIG": False,
    "NVMLDeviceHealthCheck": False,
    "ComputeDomainCliques": True,
    "CrashOnNVLinkFabricErrors": True,
}

# Main at 95932046 adds four Alpha gates to 0.4.1's; v0.5.0 ships them (its docs: FabricManagerPartitioning,
# ConsumableShares, HostManagedIMEXDaemon, the list-form numaNode).
_GATES_0_5 = {
    **_GATES_25_12,
    "DeviceMetadata": False,
    "FabricManagerPartitioning": False,
    "HostManagedIMEXDaemon": False,
    "DRAListTypeAttributes": False,
    "ConsumableShares": False,
}


@dataclass(frozen=True)
class GateRule:
    """A start-time check of pkg/featuregates ValidateFeatureGates: `gate` on needs `other` on
    (`requires`), or must not be on together with it."""

    gate: str
    other: str
    requires: bool

    def problem(self, gates: Mapping[str, bool]) -> str:
        """The real error message when `gates` break the rule, else ""."""
        broken = gates[self.gate] and gates[self.other] != self.requires
        if not broken:
            return ""
        if self.requires:
            return f"feature gate {self.gate} requires {self.other} to also be enabled"
        return f"feature gate {self.gate} is currently mutually exclusive with {self.other}"


# ValidateFeatureGates at v25.12.0, in its order (the first broken rule is the error).
_RULES_25_12 = (
    GateRule("ComputeDomainCliques", "IMEXDaemonsWithDNSNames", requires=True),
    GateRule("DynamicMIG", "PassthroughSupport", requires=False),
    GateRule("DynamicMIG", "NVMLDeviceHealthCheck", requires=False),
    GateRule("DynamicMIG", "MPSSupport", requires=False),
)

# v0.4.1 adds two rules; main at 95932046 has the same six.
_RULES_0_4_1 = (
    *_RULES_25_12,
    GateRule("PassthroughSupport", "NVMLDeviceHealthCheck", requires=False),
    GateRule("DeviceMetadata", "PassthroughSupport", requires=True),
)


@dataclass(frozen=True)
class DriverRelease:
    """What one release of NVIDIA's driver publishes and accepts, where fakeplugin can show it."""

    name: str  # what users write: driverRelease: "0.4.1"
    tag: str  # the upstream git tag ("" for a snapshot of main)
    commit: str  # the tag's commit in kubernetes-sigs/dra-driver-nvidia-gpu
    k8s_libs: str  # vendored k8s.io/dynamic-resource-allocation
    feature_gates: Mapping[str, bool]  # known gates and their defaults
    gate_rules: tuple[GateRule, ...]  # checked at start, in this order
    attributes: frozenset[str]  # device attribute keys it may publish
    device_classes: tuple[str, ...]  # device types the chart installs a DeviceClass for
    # ResourceSlice generateName, from the vendored resourceslice controller: libs 0.34
    # `<node>-<driver>-`; libs 0.36 `<index as 5+ hex digits>-<driver>-<node>-`.
    slice_index_prefix: bool
    # Opaque config (api/nvidia.com/resource/v1beta1): 25.12 gives configs without `sharing` an implicit
    # TimeSlicing when TimeSlicingSettings is on (gpuconfig.go/migconfig.go Normalize, Default*Config;
    # removed by PR #1183 in v0.4.1), and its validation errors are terse (validate.go).
    implicit_time_slicing: bool
    verbose_sharing_errors: bool
    vfio_iommu_config: bool  # VfioDeviceConfig has the `iommu` field (iommu.go, new in v0.4.0)
    # The architectures its vendored go-nvlib names (pkg/nvlib/device/device.go GetArchitectureAsString).
    # Any other fails the plugin at start, publishing nothing (publish.node.check_architectures).
    architectures: frozenset[str]
    # The DRAListTypeAttributes gate is on (`with_gates`): list-capable attributes are published as
    # lists, numaNode as `{"ints": [n]}` (deviceinfo.go addNumaNodeAttribute at 95932046).
    list_type_attributes: bool = False
    # The checkpoint's `configState.mpsControlDaemonID` has `omitempty` (cmd/gpu-kubelet-plugin/
    # device_state.go `DeviceConfigState`: added by commit 75a2d69f on main, 2026-07-29; reverted by
    # PR #1326, 2026-08-11). A checkpoint whose JSON differs in it fails the reader's checksum
    # (fakeplugin.drivers.gpu.prepare.checkpoint).
    checkpoint_mps_id_omitempty: bool = False
    # Prepare of an allocated device the plugin does not hold (device_state.go: v25.12.0 getConfigResultsMap
    # "requested device is not allocatable: %v", v0.4.1 and main `allocatable not found for device %q`).
    not_allocatable: str = 'allocatable not found for device "{}"'

    def with_gates(self, gates: Mapping[str, bool]) -> DriverRelease:
        """The release as it publishes with these feature gates (featuregates.parse's result)."""
        return replace(self, list_type_attributes=gates.get("DRAListTypeAttributes", False))


# Not a release: main at 95932046 (2026-08-07, chart 0.5.0-dev), the newest driver source
# available here; the v0.5.0 tag (2026-08-18) is not. docs/driver-releases.md marks it unverified.
_MAIN_0_5 = DriverRelease(
    name="0.5.0-dev",
    tag="",
    commit="95932046683719c43b6a0dd9613c2e5aad5d6703",
    k8s_libs="v0.36.0",
    feature_gates=MappingProxyType(_GATES_0_5),
    gate_rules=_RULES_0_4_1,
    attributes=GPU_ATTRIBUTES | {NUMA_NODE_ATTRIBUTE},
    device_classes=("gpu", "mig", "vfio"),
    slice_index_prefix=True,
    implicit_time_slicing=False,
    verbose_sharing_errors=True,
    vfio_iommu_config=True,
    architectures=frozenset(ARCHITECTURES),
    checkpoint_mps_id_omitempty=True,
)


RELEASES: dict[str, DriverRelease] = {
    r.name: r
    for r in (
        DriverRelease(
            name="25.12",
            tag="v25.12.0",
            commit="0882da8720c28763137e0987778ec476ec4cf8df",
            k8s_libs="v0.34.0",
            feature_gates=MappingProxyType(_GATES_25_12),
            gate_rules=_RULES_25_12,
            attributes=GPU_ATTRIBUTES,
            device_classes=("gpu", "mig", "vfio"),
            slice_index_prefix=False,
            implicit_time_slicing=True,
            verbose_sharing_errors=False,
            vfio_iommu_config=False,
            architectures=_BEFORE_RUBIN,
            not_allocatable="requested device is not allocatable: {}",
        ),
        DriverRelease(
            name="0.4.1",
            tag="v0.4.1",
            commit="764900e7833798a1528bd52a2af3e1b2d5f7a616",
            k8s_libs="v0.36.0-rc.0",
            feature_gates=MappingProxyType({**_GATES_25_12, "DeviceMetadata": False}),
            gate_rules=_RULES_0_4_1,
            attributes=GPU_ATTRIBUTES,
            device_classes=("gpu", "mig", "vfio"),
            slice_index_prefix=True,
            implicit_time_slicing=False,
            verbose_sharing_errors=True,
            vfio_iommu_config=True,
            architectures=_BEFORE_RUBIN,
        ),
        _MAIN_0_5,
        # Released 2026-08-19 (issue #1365, PR #1367, chart dra-driver-nvidia-gpu 0.5.0). The tag is not in
        # the newest snapshot available here (it ends at main 95932046), so `commit` is unknown. Inferred:
        # it has PR #1326 (merged 2026-08-11; the bump PR was opened 2026-08-18, and release-0.4 was cut from
        # main at its rc) and go-nvlib v0.12.0 (on main since 2026-07-10). The rest is 0.5.0-dev's, which
        # v0.5.0's docs confirm for the gates, numaNode and consumable shares; docs/driver-releases.md says
        # which.
        replace(_MAIN_0_5, name="0.5.0", tag="v0.5.0", commit="", checkpoint_mps_id_omitempty=False),
    )
}
DEFAULT_RELEASE = "0.5.0"  # the newest, for new users; the reference lab pins "25.12" in its inventory
NEWEST_RELEASE = "0.5.0"
# Also accepted: the tag, with or without its "v" (v0.4.1, 25.12.0).
_ALIASES = {alias: r.name for r in RELEASES.values() if r.tag for alias in (r.tag, r.tag.removeprefix("v"))}


def known() -> str:
    """The selectable releases, for messages: `25.12 (v25.12.0), …, 0.5.0 (v0.5.0)`."""
    return ", ".join(f"{r.name} ({r.tag or 'main ' + r.commit[:8]})" for r in RELEASES.values())


def get(name: str | None) -> DriverRelease:
    """The release called `name` (its name or tag; None: the default). ValueError lists the known ones."""
    if name is None:
        return RELEASES[DEFAULT_RELEASE]
    release = RELEASES.get(_ALIASES.get(name, name))
    if release is None:
        raise ValueError(f'unknown NVIDIA driver release "{name}"; known: {known()}')
    return release
