"""The labels NVIDIA's GPU Operator puts on a node with GPUs, from the node's inventory entry (pure): what a
Deployment's nodeSelector or a Karpenter NodePool reads (`nvidia.com/gpu.product`, `gpu.memory`, ...).

The entry's `gpuOperator` picks the operator's mode:

- `clusterPolicy` (the default): GPU Feature Discovery's labels, as GFD v0.20.0 computes them (the version
  the operator v26.3.1 of the reference lab and v26.7.0 deploy), NVIDIA/k8s-device-plugin at v0.20.0
  (commit 1b826acc6af3079d8923bac395c3124b8861a9a6): `internal/lm/nvml.go` (CUDA driver and runtime
  versions in both spellings, `mig.capable` if any GPU is, `mps.capable`, `gpu.mode`), `resource.go`
  (product, count, replicas, sharing strategy, memory in MiB, family from the compute capability),
  `mig-strategy.go` and `strategy.go` (the MIG strategy's labels), `machine-type.go`, `timestamp.go`,
  `vgpu.go`, and `internal/resource/nvml-mig-device.go` (a MIG device's attributes); `imex.go`'s
  `nvidia.com/gpu.clique` is the inventory's own (inventory.model.NodeEntry.node_labels). Then the
  operator's own: `nvidia.com/gpu.present=true` and the container workload's `gpu.deploy.*` labels
  (NVIDIA/gpu-operator v26.3.1, commit 5a25fef4572b2b36e32ebcacd482b586e467dc2d,
  `controllers/state_manager.go`: `gpuStateLabels`, `addGPUStateLabels`, which adds
  `gpu.deploy.mig-manager` on a MIG-capable node, and `labelGPUNodes`, which sets `mig.config` to the MIG
  manager's default `all-disabled` (`deployments/gpu-operator/values.yaml`) where none is set), and the
  driver upgrade controller's `nvidia.com/gpu-driver-upgrade-state=upgrade-done` (`upgradePolicy.autoUpgrade`
  is on by default; the key and value: `vendor/github.com/NVIDIA/k8s-operator-libs/pkg/upgrade/consts.go`).
  These are v26.3.1's, the reference lab's operator; v26.7.0's ClusterPolicy adds `gpu.deploy.client`.
- `gpuCluster` (v26.7.0's DRA mode): no GFD at all, only `gpu.present` and that mode's deploy labels
  (v26.7.0, commit 10ee5b3638b89e11e949412aafa5ba99279c3721, `controllers/state_manager.go`:
  `gpuClusterStateLabels`).
- `none`: nothing.

Where GFD reads what a simulated node does not have, the choice is ours:

- `gpu.machine` is `/sys/class/dmi/id/product_name`, sanitised. Our nodes are QEMU/KVM virtual machines, as
  the reference lab's nodes and both H200 captures are: QEMU's q35 machine names itself
  `Standard PC (Q35 + ICH9, 2009)` (the value a V100 node with the operator shows as
  `Standard-PC-Q35-ICH9-2009`), the same for every node.
- `gpu.mode` is the PCI class of every GPU (0x0300 graphics, 0x0302 compute; GFD's README says "display",
  its code writes `graphics`): the profile's `pciClass`, and `unknown` where no capture gives it, as GFD
  writes when it cannot read the class.
- Several GPU models on one node: GFD makes one labeller per model name from Go maps, so which model's
  `gpu.product`, `gpu.count`, `gpu.memory` win depends on map order; we take the first GPU's model
  (full GPUs over MIG-enabled ones, as GFD orders its two groups).
- The MIG strategy is the ClusterPolicy's `mig.strategy`, the inventory's `migStrategy` (`single` by
  default, as values.yaml's); `mixed` labels each MIG profile as the resource `nvidia.com/mig-<profile>`
  (`newMigStrategyMixedLabeler` in `mig-strategy.go`, which names it `"nvidia.com/mig-" + name`, the
  name `GetName` gives); no sharing
  (time-slicing, MPS) is configured for the device plugin, so replicas are 1 and `mps.capable` false.
- A MIG device's compute-instance slices equal its GPU instance's (the full-size compute instance
  `nvidia-smi mig -cgi ... -C` creates).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fakeplugin.inventory import GpuEntry, Inventory, NodeEntry
from fakeplugin.profiles import MigProfile

MIB = 1024 * 1024
# On a kubelet node whose plugin keeps these labels (serve --gpu-operator-labels): the keys it gave.
OWNED_ANNOTATION = "fakeplugin.dev/gpu-operator-labels"
PREFIX = "nvidia.com/"
PRESENT = "nvidia.com/gpu.present"
TIMESTAMP = "nvidia.com/gfd.timestamp"
# QEMU's q35 DMI product name (see the module's docstring).
MACHINE = "Standard PC (Q35 + ICH9, 2009)"
MIG_CONFIG_DEFAULT = "all-disabled"  # gpu-operator values.yaml `migManager.config.default`
# gpu-operator state_manager.go: gpuStateLabels[container] (v26.3.1) and gpuClusterStateLabels (v26.7.0).
CLUSTER_POLICY_DEPLOY = (
    "driver",
    "gpu-feature-discovery",
    "container-toolkit",
    "device-plugin",
    "dcgm",
    "dcgm-exporter",
    "node-status-exporter",
    "operator-validator",
)
GPU_CLUSTER_DEPLOY = ("driver", "dra-driver", "dra-validator", "dcgm-dra", "dcgm-exporter-dra")
# nvpci's PCIVgaControllerClass and PCI3dControllerClass (class << 8, as sysfs holds it).
PCI_CLASS_MODES = {0x030000: "graphics", 0x030200: "compute"}

_NOT_LABEL = re.compile(r"[^A-Za-z0-9-_. ]")


def sanitise(text: str) -> str:
    """GFD's `sanitise` (resource.go): drop what is not [A-Za-z0-9-_. ], runs of blanks become one `-`."""
    return "-".join(_NOT_LABEL.sub("", text).split())


def family(major: int, minor: int) -> str:
    """GFD's `getArchFamily` (resource.go) of a CUDA compute capability."""
    names = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper", 13: "rubin"}
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return "blackwell" if major in (10, 12) else names.get(major, "undefined")


def operator_labels(inventory: Inventory, entry: NodeEntry, *, timestamp: int) -> dict[str, str]:
    """The GPU Operator's labels of a node of `entry` (its `gpu_operator` mode, the inventory's
    `mig_strategy`); none without GPUs, where the operator deploys nothing. `timestamp`: when GFD
    labelled (seconds since the epoch)."""
    gpus = [g for g in entry.gpus for _ in range(g.count)]  # GFD's devices, in minor order
    if not gpus or entry.gpu_operator == "none":
        return {}
    if entry.gpu_operator == "gpuCluster":
        return {PRESENT: "true", **_deploy(GPU_CLUSTER_DEPLOY)}
    labels = {
        TIMESTAMP: str(timestamp),
        f"{PREFIX}gpu.machine": sanitise(MACHINE),
        **_versions(inventory.driver_version, inventory.cuda_driver_version),
        f"{PREFIX}mig.capable": str(any(g.profile.mig is not None for g in gpus)).lower(),
        f"{PREFIX}mps.capable": "false",
        **_full_gpus(gpus),
        **_mig(gpus, inventory.mig_strategy),
        f"{PREFIX}gpu.mode": _mode(gpus),
        f"{PREFIX}vgpu.present": "false",
        PRESENT: "true",
        **_deploy(CLUSTER_POLICY_DEPLOY),
        f"{PREFIX}gpu-driver-upgrade-state": "upgrade-done",
    }
    if labels[f"{PREFIX}mig.capable"] == "true":
        labels[f"{PREFIX}gpu.deploy.mig-manager"] = "true"
        if not any(g.mig is not None for g in gpus):  # a MIG layout is the user's mig.config, not the default
            labels[f"{PREFIX}mig.config"] = MIG_CONFIG_DEFAULT
    return labels


def launch_labels(inventory: Inventory, entry: NodeEntry) -> dict[str, str]:
    """The GPU Operator's labels of a node of `entry` known before it runs (a Karpenter instance type's):
    all but GFD's timestamp, which only the labelling gives."""
    labels = operator_labels(inventory, entry, timestamp=0)
    labels.pop(TIMESTAMP, None)
    return labels


def gpu_node_labels(inventory: Inventory, entry: NodeEntry, *, timestamp: int) -> dict[str, str]:
    """Every label a node of `entry` gets from us: the GPU Operator's, then the entry's own (its `labels`
    and the clique label of a fabric), which win where they name the same key."""
    return operator_labels(inventory, entry, timestamp=timestamp) | entry.node_labels


def owned_labels_patch(
    meta: Mapping[str, Any], want: Mapping[str, str], annotation: str, also: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The merge patch of a Node's metadata (`meta`) that gives it the labels `want` (and `also`, not
    recorded), removes those it gave before but no longer gives (their keys are the value of `annotation`;
    any other label, e.g. one a user added, stays) and records `want`'s keys; None when nothing changes."""
    have = meta.get("labels") or {}
    before = set(filter(None, (meta.get("annotations") or {}).get(annotation, "").split(",")))
    labels: dict[str, str | None] = {k: v for k, v in {**want, **(also or {})}.items() if have.get(k) != v}
    labels.update({k: None for k in sorted(before - set(want)) if k in have})
    keys = ",".join(sorted(want))
    if not labels and keys == ",".join(sorted(before)):
        return None
    return {"metadata": {"labels": labels, "annotations": {annotation: keys}}}


def owned_labels_removal(meta: Mapping[str, Any], annotation: str) -> dict[str, Any] | None:
    """The merge patch that removes the labels `annotation` lists, and the annotation; None without it."""
    owned = (meta.get("annotations") or {}).get(annotation)
    if owned is None:
        return None
    labels = {k: None for k in sorted(filter(None, owned.split(",")))}
    return {"metadata": {"labels": labels, "annotations": {annotation: None}}}


def _deploy(operands: Iterable[str]) -> dict[str, str]:
    return {f"{PREFIX}gpu.deploy.{o}": "true" for o in operands}


def _versions(driver: str, cuda: str) -> dict[str, str]:
    """nvml.go newVersionLabeler: the driver version `X.Y[.Z]` and NVML's CUDA driver version `X.Y`."""
    major, minor, *rev = driver.split(".")
    cuda_major, cuda_minor = (str(int(part)) for part in cuda.split("."))
    revision = rev[0] if rev else ""
    return {
        f"{PREFIX}cuda.driver.major": major,
        f"{PREFIX}cuda.driver.minor": minor,
        f"{PREFIX}cuda.driver.rev": revision,
        f"{PREFIX}cuda.runtime.major": cuda_major,
        f"{PREFIX}cuda.runtime.minor": cuda_minor,
        f"{PREFIX}cuda.driver-version.major": major,
        f"{PREFIX}cuda.driver-version.minor": minor,
        f"{PREFIX}cuda.driver-version.revision": revision,
        f"{PREFIX}cuda.driver-version.full": driver,
        f"{PREFIX}cuda.runtime-version.major": cuda_major,
        f"{PREFIX}cuda.runtime-version.minor": cuda_minor,
        f"{PREFIX}cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


def _resource(resource: str, count: int, replicas: int, *parts: str) -> dict[str, str]:
    """resource.go baseLabeler: `<resource>.{product,count,replicas,sharing-strategy}` (no sharing)."""
    return {
        f"{resource}.product": "-".join(sanitise(p) for p in parts if p),
        f"{resource}.count": str(count),
        f"{resource}.replicas": str(replicas),
        f"{resource}.sharing-strategy": "none",
    }


def _full_gpus(gpus: list[GpuEntry]) -> dict[str, str]:
    """mig-strategy.go newGPULabelers: one labeller per model name (the last GPU of that name, counting its
    GPUs with MIG on and off), MIG-enabled models first (no sharing: replicas 0), then full GPUs; later
    ones overwrite earlier ones."""
    counts: dict[str, int] = {}
    for gpu in gpus:
        counts[gpu.product_name] = counts.get(gpu.product_name, 0) + 1
    labels: dict[str, str] = {}
    for replicas, mig_enabled in ((0, True), (1, False)):
        group = {g.product_name: g for g in gpus if (g.mig is not None) == mig_enabled}
        for gpu in reversed(group.values()):  # invariant: the node's first model is merged last and wins
            labels |= _resource(f"{PREFIX}gpu", counts[gpu.product_name], replicas, gpu.product_name)
            memory = gpu.memory_bytes // MIB
            if memory:
                labels[f"{PREFIX}gpu.memory"] = str(memory)
            major, minor = (int(n) for n in gpu.profile.cuda_compute_capability.split("."))
            if major:
                labels |= {
                    f"{PREFIX}gpu.family": family(major, minor),
                    f"{PREFIX}gpu.compute.major": str(major),
                    f"{PREFIX}gpu.compute.minor": str(minor),
                }
    return labels


def _mig_name(profile: MigProfile) -> str:
    """nvml-mig-device.go GetName: the MIG profile, `+` as `.` (`1g.5gb+me` → `1g.5gb.me`)."""
    return profile.name.replace("+", ".")


def _mig_device(resource: str, count: int, model: str, profile: MigProfile) -> dict[str, str]:
    """resource.go NewMIGResourceLabeler: `<model>-MIG-<profile>` and the MIG device's attributes."""
    attributes = {
        "memory": profile.memory_mib,
        "multiprocessors": profile.multiprocessors,
        "slices.gi": profile.slices,
        "slices.ci": profile.slices,
        "engines.copy": profile.copy_engines,
        "engines.decoder": profile.decoders,
        "engines.encoder": profile.encoders,
        "engines.jpeg": profile.jpeg_engines,
        "engines.ofa": profile.ofa_engines,
    }
    return _resource(resource, count, 1, model, "MIG", _mig_name(profile)) | {
        f"{resource}.{k}": str(v) for k, v in attributes.items()
    }


def _mig(gpus: list[GpuEntry], strategy: str) -> dict[str, str]:
    """mig-strategy.go newMigLabeler: `mig.strategy` and, with MIG devices, `single`'s or `mixed`'s labels."""
    if strategy == "none":
        return {}
    labels = {f"{PREFIX}mig.strategy": strategy}
    # Each MIG device with its parent's name, in GPU order (GFD keeps the first of each profile name).
    devices = [(g.product_name, m.profile) for g in gpus for m in g.mig or ()]
    per_name: dict[str, tuple[str, MigProfile, int]] = {}
    for model, profile in devices:
        first_model, first, n = per_name.get(_mig_name(profile), (model, profile, 0))
        per_name[_mig_name(profile)] = (first_model, first, n + 1)
    if strategy == "mixed":
        for name, (model, profile, n) in per_name.items():
            labels |= _mig_device(f"{PREFIX}mig-{name}", n, model, profile)
        return labels
    enabled = [g for g in gpus if g.mig is not None]
    if not enabled:
        return labels
    if any(not g.mig for g in enabled) or len(enabled) < len(gpus) or len(per_name) != 1:
        # newInvalidMigStrategyLabeler, from the first MIG-enabled GPU.
        return labels | {
            f"{PREFIX}gpu.product": "-".join((sanitise(enabled[0].product_name), "MIG", "INVALID")),
            f"{PREFIX}gpu.count": "0",
            f"{PREFIX}gpu.replicas": "0",
            f"{PREFIX}gpu.sharing-strategy": "",
            f"{PREFIX}gpu.memory": "0",
        }
    ((model, profile, n),) = per_name.values()
    return labels | _mig_device(f"{PREFIX}gpu", n, model, profile)


def _mode(gpus: list[GpuEntry]) -> str:
    """nvml.go newGPUModeLabeler: the PCI class all GPUs share; `unknown` if they differ or one is unknown."""
    classes = {g.profile.pci_class for g in gpus}
    if None in classes or len(classes) != 1:
        return "unknown"
    return PCI_CLASS_MODES.get(classes.pop() or 0, "unknown")
