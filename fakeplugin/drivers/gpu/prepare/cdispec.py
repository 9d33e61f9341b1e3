"""gpu.nvidia.com's CDI spec of a prepared claim, built as a plain dict (pure); fakeplugin.cdi checks,
writes and removes spec files.

Shape follows the real driver (v25.12+): one transient spec per claim,
`<cdi_root>/k8s.<driver>-claim_<claimUID>.yaml`, kind `k8s.<driver>/claim`, one CDI device per
allocated GPU named `<claimUID>-<deviceName>`, `cdiVersion` the minimum the content needs.

Container edits: the kubelet hands each container only the CDI devices of the requests it references
(a claim's request → its devices' IDs), so whatever must match a container's own devices sits at device
level; the spec level holds only what every user of the claim shares, as with the real driver:
- spec level (applied whenever any device of the claim is injected): `NVIDIA_VISIBLE_DEVICES=void`
  (the real driver's value: devices come from CDI, never from the NVIDIA runtime reading this variable),
  `FAKEPLUGIN_CLAIM_UID=<claimUID>`;
- device level (only for the GPUs a container actually got; CDI rejects devices without edits):
  `<prefix>UUID=<uuid>` and `<prefix>DEVICE=<device name>` with `<prefix>` `FAKEPLUGIN_GPU_<minor>_`, for
  a MIG device `FAKEPLUGIN_GPU_<parentMinor>_MIG_<giProfileId>_<placementStart>_`; the device's sharing
  settings (`settings_env`), as the real driver keeps config edits (MPS) per device.
With `device_nodes=True` the edits also carry fake character devices: `/dev/nvidia<minor>` (195:<minor>)
per GPU (for a MIG device its parent's; the real driver adds /dev/nvidia-caps nodes whose minors depend
on NVML's GPU/compute instance IDs, which the fake does not model), and `/dev/nvidiactl` (195:255),
`/dev/nvidia-uvm` (238:0), `/dev/nvidia-uvm-tools` (238:1) at spec level. Type, major and minor are
always set, so the CDI library never stats the host for them.
With `plugin_dir` the edits also mount the fake nvidia-smi: the script at spec level, each GPU's data file
at device level (fakeplugin.drivers.gpu.prepare.smi). With `nvml_library` too, the mock NVML library at
spec level (where containers find `libnvidia-ml.so.1` by name) and each device's NVML description file at
device level (fakeplugin.drivers.gpu.prepare.nvmldata), so NVML in a container lists its own devices.

VFIO devices (PassthroughSupport) get the edits the real driver writes for a GPU bound to vfio-pci, the
group's VfioDeviceConfig (DeviceSettings `iommu_*`) choosing them (v0.4.1 vfio-cdi.go `GetCommonEdits`,
`GetDeviceSpecsByPCIBusID`, cdi.go `CreateClaimSpecFile`; v25.12.0 vfio-device.go
`GetVfioCommonCDIContainerEdits`, `GetVfioCDIContainerEdits`):
- spec level, replacing the edits above (upstream replaces nvcdi's common edits; a claim is assumed to hold
  VFIO devices only): `NVIDIA_VISIBLE_DEVICES=void` and the IOMMU API device: 25.12 always `/dev/vfio/vfio`;
  v0.4.0+ only with `enableAPIDevice`, `/dev/iommu` for PreferIommuFD on a host with IOMMUFD, else
  `/dev/vfio/vfio`;
- device level: `/dev/vfio/devices/vfio<N>` (the iommufd cdev) for PreferIommuFD on a host with IOMMUFD,
  else the IOMMU group's `/dev/vfio/<group>`.
These nodes are always written with type, major and minor (whatever `device_nodes` says: they are all a
VFIO device gets): `/dev/vfio/vfio` is misc 10:196 (VFIO_MINOR); the others are numbered dynamically on
real hosts, here `VFIO_GROUP_MAJOR`:<n>, `VFIO_CDEV_MAJOR`:<n> and misc 10:`IOMMU_MINOR`.

Specs of earlier fakeplugin versions set the claim's UUIDs and device names at spec level
(`NVIDIA_VISIBLE_DEVICES=<uuids>`, `FAKEPLUGIN_CLAIM_DEVICES=<names>`), so every container of the claim saw
all its GPUs in env, and mounted the nvidia-smi script without its awk program (the script was
self-contained then); `upgrade_spec` turns such a spec into the current shape, keeping everything else.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.cdi import (
    EARLIEST_VERSION,
    VISIBLE_DEVICES_VOID,
    cdi_device_name,
    char_device,
    kind,
    mappings,
    required_version,
    spec_text,
    write_spec,
)
from fakeplugin.drivers.gpu.prepare import smi
from fakeplugin.drivers.gpu.prepare.opaqueconfig import MPS, MPS_PIPE_DIRECTORY, PREFER_IOMMUFD
from fakeplugin.model import DeviceSettings, GpuDevice

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CLAIM_UID_ENV = "FAKEPLUGIN_CLAIM_UID"
GPU_ENV_PREFIX = "FAKEPLUGIN_GPU_"

NVIDIA_MAJOR = 195  # fixed for the NVIDIA driver
NVIDIACTL_MINOR = 255
UVM_MAJOR = 238  # dynamically numbered on real hosts; this is the captured H200 host's value
MISC_MAJOR = 10
VFIO_MINOR = 196  # /dev/vfio/vfio (linux include/linux/miscdevice.h)
IOMMU_MINOR = 125  # /dev/iommu: a dynamic misc minor on real hosts
VFIO_GROUP_MAJOR = 241  # /dev/vfio/<group>: dynamic on real hosts
VFIO_CDEV_MAJOR = 240  # /dev/vfio/devices/vfio<N>: dynamic on real hosts


def claim_spec(
    claim_uid: str,
    devices: Sequence[GpuDevice],
    *,
    driver_name: str,
    device_nodes: bool = False,
    plugin_dir: Path | None = None,
    settings: Mapping[str, DeviceSettings] | None = None,
    nvml_library: Path | None = None,
) -> dict[str, Any]:
    """The CDI spec of one claim (see the module docstring for the edits).

    `settings`: device name → what its opaque config applied, rendered into that device's env
    (`settings_env`); devices without settings are left out. `nvml_library` (the built mock NVML
    library) needs `plugin_dir`, where the devices' NVML description files are.
    """
    if not devices:
        raise ValueError(f"claim {claim_uid}: a CDI spec needs at least one device")
    if nvml_library is not None and plugin_dir is None:
        raise ValueError(f"claim {claim_uid}: the NVML library's descriptions need the plugin directory")
    vfio = [d for d in devices if d.vfio is not None]
    if vfio:
        spec_edits = _vfio_common_edits(vfio[0], (settings or {}).get(vfio[0].name))
    else:
        spec_edits = _common_edits(claim_uid, device_nodes, plugin_dir, nvml_library)
    spec: dict[str, Any] = {
        "cdiVersion": EARLIEST_VERSION,
        "kind": kind(driver_name),
        "devices": [
            _device_entry(claim_uid, d, device_nodes, plugin_dir, (settings or {}).get(d.name), nvml_library)
            for d in devices
        ],
        "containerEdits": spec_edits,
    }
    spec["cdiVersion"] = required_version(spec)
    return spec


def _common_edits(
    claim_uid: str, device_nodes: bool, plugin_dir: Path | None, nvml_library: Path | None
) -> dict[str, Any]:
    spec_edits: dict[str, Any] = {"env": [VISIBLE_DEVICES_VOID, f"{CLAIM_UID_ENV}={claim_uid}"]}
    if device_nodes:
        spec_edits["deviceNodes"] = [
            char_device("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
            char_device("/dev/nvidia-uvm", UVM_MAJOR, 0),
            char_device("/dev/nvidia-uvm-tools", UVM_MAJOR, 1),
        ]
    if plugin_dir is not None:
        spec_edits["mounts"] = smi.spec_mounts(plugin_dir)
    if nvml_library is not None:
        # Here, not at the top: the plugin loads the NVML modules only once it mounts the library.
        from fakeplugin.drivers.gpu.prepare import nvmldata

        spec_edits["mounts"] += nvmldata.spec_mounts(nvml_library)
    return spec_edits


def _prefers_iommufd(device: GpuDevice, settings: DeviceSettings | None) -> bool:
    assert device.vfio is not None
    policy = settings.iommu_backend_policy if settings else None
    return policy == PREFER_IOMMUFD and device.vfio.iommufd_enabled


def _vfio_common_edits(device: GpuDevice, settings: DeviceSettings | None) -> dict[str, Any]:
    """The claim's VFIO edits at spec level, from its (one) VFIO group's settings; `device`, one of the
    group's, tells whether the host has IOMMUFD."""
    edits: dict[str, Any] = {"env": [VISIBLE_DEVICES_VOID]}
    legacy = settings is None or settings.iommu_backend_policy is None  # 25.12: always the container
    if legacy or (settings is not None and settings.iommu_api_device):
        edits["deviceNodes"] = [
            char_device("/dev/iommu", MISC_MAJOR, IOMMU_MINOR)
            if _prefers_iommufd(device, settings)
            else char_device("/dev/vfio/vfio", MISC_MAJOR, VFIO_MINOR)
        ]
    return edits


def vfio_device_node(device: GpuDevice, settings: DeviceSettings | None) -> dict[str, Any]:
    """The device node a VFIO device's CDI entry injects (module docstring)."""
    assert device.vfio is not None
    n = device.vfio.index
    if _prefers_iommufd(device, settings):
        return char_device(f"/dev/vfio/devices/{device.vfio.iommufd}", VFIO_CDEV_MAJOR, n)
    return char_device(f"/dev/vfio/{device.vfio.iommu_group}", VFIO_GROUP_MAJOR, n)


def device_env_prefix(device: GpuDevice) -> str:
    """`FAKEPLUGIN_GPU_<minor>_` or `FAKEPLUGIN_GPU_<minor>_MIG_<giProfileId>_<start>_` (a MIG device)."""
    mig = f"_MIG_{device.mig.gi_profile_id}_{device.mig.start}" if device.mig is not None else ""
    return f"{GPU_ENV_PREFIX}{device.minor}{mig}_"


def settings_env(settings: DeviceSettings, prefix: str) -> tuple[str, ...]:
    """The container env that makes a device's sharing settings visible (CDI edits of the device).

    `prefix` names the device (`device_env_prefix`, e.g. `FAKEPLUGIN_GPU_0_`): `<prefix>SHARING_STRATEGY`,
    `TIMESLICE_INTERVAL`, `MPS_CONTROL_DAEMON`, `MPS_ACTIVE_THREAD_PERCENTAGE`,
    `MPS_PINNED_DEVICE_MEMORY_LIMIT`, `MPS_MULTI_USER=true`; unset settings are left out. MPS adds the real
    driver's `CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps`.
    """
    values = (
        ("SHARING_STRATEGY", settings.strategy),
        ("TIMESLICE_INTERVAL", settings.timeslice_interval),
        ("MPS_CONTROL_DAEMON", settings.mps_control_daemon),
        ("MPS_ACTIVE_THREAD_PERCENTAGE", settings.mps_active_thread_percentage),
        ("MPS_PINNED_DEVICE_MEMORY_LIMIT", settings.mps_pinned_device_memory_limit),
        ("MPS_MULTI_USER", "true" if settings.mps_multi_user else None),
    )
    env = [f"{prefix}{name}={value}" for name, value in values if value is not None]
    if settings.strategy == MPS:
        env.append(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIRECTORY}")
    return tuple(env)


def _device_entry(
    claim_uid: str,
    device: GpuDevice,
    device_nodes: bool,
    plugin_dir: Path | None,
    settings: DeviceSettings | None,
    nvml_library: Path | None,
) -> dict[str, Any]:
    if device.vfio is not None:
        edits = {"deviceNodes": [vfio_device_node(device, settings)]}
        return {"name": cdi_device_name(claim_uid, device.name), "containerEdits": edits}
    prefix = device_env_prefix(device)
    env = [
        f"{prefix}UUID={device.uuid}",
        f"{prefix}DEVICE={device.name}",
        *(settings_env(settings, prefix) if settings else ()),
    ]
    edits: dict[str, Any] = {"env": env}
    if device_nodes:
        edits["deviceNodes"] = [char_device(f"/dev/nvidia{device.minor}", NVIDIA_MAJOR, device.minor)]
    if plugin_dir is not None:
        edits["mounts"] = smi.device_mounts(plugin_dir, claim_uid, device)
        if nvml_library is not None:
            from fakeplugin.drivers.gpu.prepare import nvmldata  # as in claim_spec

            edits["mounts"] += nvmldata.device_mounts(plugin_dir, claim_uid, device)
    return {"name": cdi_device_name(claim_uid, device.name), "containerEdits": edits}


# The claim spec's text is made once per shape (the same devices, settings and paths) for a stand-in UID,
# then the claim's UID put in its place: a lowercase UUID is a plain YAML scalar wherever it stands (no
# implicit type starts with 8 hex digits and a '-'), and so is the stand-in, of the same length, so the
# result is the text of the claim's own spec. What the UID itself decides, the stand-in shares: its first
# character is a digit exactly when the claim's is (CDI device names starting with one need cdiVersion
# 0.5.0). YAML's representer cost a Prepare more CPU than the rest of its spec (issue 32).
_STAND_IN_UIDS = {True: "00000000-0000-4000-8000-000000000000", False: "a0000000-0000-4000-8000-000000000000"}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TEXTS_MAX = 1024  # shapes kept (a node's claims have few); the next one starts over
_texts: dict[str, str] = {}  # a stand-in spec as JSON → its YAML text


def claim_spec_text(claim_uid: str, devices: Sequence[GpuDevice], **kw: Any) -> str:
    """`spec_text(claim_spec(claim_uid, devices, **kw))`, for the cost of a dict lookup once a claim of the
    same shape had it."""
    if not _UUID.fullmatch(claim_uid):  # not a UID the API server gives: no stand-in for it
        return spec_text(claim_spec(claim_uid, devices, **kw))
    stand_in = _STAND_IN_UIDS[claim_uid[0].isdigit()]
    spec = claim_spec(stand_in, devices, **kw)
    key = json.dumps(spec)
    text = _texts.get(key)
    if text is None:
        text = spec_text(spec)
        if len(_texts) >= _TEXTS_MAX:
            _texts.clear()
        _texts[key] = text
    return text.replace(stand_in, claim_uid)


def upgrade_spec(spec: Mapping[str, Any], claim_uid: str) -> dict[str, Any] | None:
    """An earlier version's spec of claim `claim_uid` in the current shape (module docstring): the
    spec-level `NVIDIA_VISIBLE_DEVICES=<uuids>` becomes `void`, `FAKEPLUGIN_CLAIM_DEVICES` goes, each
    device gains its `<prefix>DEVICE`, the nvidia-smi script's mount gains its awk program's
    (`smi.with_program_mount`); None when the spec has the current shape already."""
    edits = spec.get("containerEdits")
    edits = edits if isinstance(edits, Mapping) else {}
    env = [e for e in edits.get("env") or [] if isinstance(e, str)]
    mounts = smi.with_program_mount(edits.get("mounts"))
    if VISIBLE_DEVICES_VOID in env and mounts is None:
        return None
    per_claim = ("NVIDIA_VISIBLE_DEVICES=", "FAKEPLUGIN_CLAIM_DEVICES=")
    upgraded = copy.deepcopy(dict(spec))
    upgraded["containerEdits"] = {
        **copy.deepcopy(dict(edits)),
        "env": [VISIBLE_DEVICES_VOID, *(e for e in env if not e.startswith(per_claim))],
    }
    if mounts is not None:
        upgraded["containerEdits"]["mounts"] = mounts
    for device in mappings(upgraded.get("devices")):
        device_edits = device.get("containerEdits")
        device_env = device_edits.get("env") if isinstance(device_edits, Mapping) else None
        if not isinstance(device_env, list) or not all(isinstance(e, str) for e in device_env):
            continue  # not a spec of ours: write_spec's validation has the last word
        keys = [entry.partition("=")[0] for entry in device_env]
        uuid_keys = [k for k in keys if k.startswith(GPU_ENV_PREFIX) and k.endswith("_UUID")]
        if len(uuid_keys) != 1:
            continue  # not one of our GPU devices: nothing to add
        prefix = uuid_keys[0].removesuffix("UUID")
        if f"{prefix}DEVICE" not in keys:
            name = str(device["name"]).removeprefix(f"{claim_uid}-")
            device_env.insert(keys.index(uuid_keys[0]) + 1, f"{prefix}DEVICE={name}")
    return upgraded


def upgrade_spec_file(path: Path, claim_uid: str) -> bool:
    """Rewrite the spec at `path` in the current shape if an earlier version wrote it (`upgrade_spec`);
    True when it did. A missing file is left missing; a spec that does not parse raises ValueError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    if VISIBLE_DEVICES_VOID in text and (
        smi.PROGRAM_CONTAINER_PATH in text or smi.SCRIPT_CONTAINER_PATH not in text
    ):  # the current shape: no need to parse
        return False
    try:
        spec = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: not YAML: {e}") from e
    if not isinstance(spec, Mapping):
        raise ValueError(f"{path}: not a CDI spec (a mapping)")
    upgraded = upgrade_spec(spec, claim_uid)
    if upgraded is None:
        return False
    write_spec(path, upgraded)
    return True
