"""CDI specs for prepared claims: built as plain dicts (pure), checked, written and removed atomically.

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
at device level (fakeplugin.prepare.smi).

Specs of earlier fakeplugin versions set the claim's UUIDs and device names at spec level
(`NVIDIA_VISIBLE_DEVICES=<uuids>`, `FAKEPLUGIN_CLAIM_DEVICES=<names>`), so every container of the claim saw
all its GPUs in env, and mounted the nvidia-smi script without its awk program (the script was
self-contained then); `upgrade_spec` turns such a spec into the current shape, keeping everything else.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic
from fakeplugin.model import DeviceSettings, GpuDevice
from fakeplugin.prepare import smi
from fakeplugin.prepare.opaqueconfig import MPS, MPS_PIPE_DIRECTORY

# libyaml's emitter when PyYAML has it (its wheels do): same YAML, a fifth of the time on Prepare's path.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

CLAIM_CLASS = "claim"
SPEC_FILE_MODE = 0o644

# Spec-level env. The real driver's NVIDIA_VISIBLE_DEVICES: CDI injects the devices, and `void` keeps the
# NVIDIA runtime (and a base image's `all`) from adding any.
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"
CLAIM_UID_ENV = "FAKEPLUGIN_CLAIM_UID"
GPU_ENV_PREFIX = "FAKEPLUGIN_GPU_"

NVIDIA_MAJOR = 195  # fixed for the NVIDIA driver
NVIDIACTL_MINOR = 255
UVM_MAJOR = 238  # dynamically numbered on real hosts; this is the captured H200 host's value

EARLIEST_VERSION = "0.3.0"
KNOWN_VERSIONS = frozenset(
    {"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"}
)

# Name rules of tags.cncf.io/container-device-interface pkg/parser.
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_DIGITS = frozenset("0123456789")

# Keys the CDI library's strict YAML decoding accepts at each level.
_SPEC_KEYS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_KEYS = frozenset({"name", "annotations", "containerEdits"})
_EDITS_KEYS = frozenset({"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"})
_NODE_KEYS = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
_MOUNT_KEYS = frozenset({"hostPath", "containerPath", "options", "type"})
_HOOK_KEYS = frozenset({"hookName", "path", "args", "env", "timeout"})
_NODE_TYPES = frozenset({"", "b", "c", "u", "p"})
_HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


def vendor(driver_name: str) -> str:
    return f"k8s.{driver_name}"


def kind(driver_name: str) -> str:
    return f"{vendor(driver_name)}/{CLAIM_CLASS}"


def cdi_device_name(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def cdi_device_id(claim_uid: str, device_name: str, *, driver_name: str) -> str:
    """The fully qualified CDI device ID the kubelet hands to the runtime, e.g.
    `k8s.gpu.nvidia.com/claim=<claimUID>-gpu-0`."""
    return f"{kind(driver_name)}={cdi_device_name(claim_uid, device_name)}"


def claim_spec(
    claim_uid: str,
    devices: Sequence[GpuDevice],
    *,
    driver_name: str,
    device_nodes: bool = False,
    plugin_dir: Path | None = None,
    settings: Mapping[str, DeviceSettings] | None = None,
) -> dict[str, Any]:
    """The CDI spec of one claim (see the module docstring for the edits).

    `settings`: device name → what its opaque config applied, rendered into that device's env
    (`settings_env`); devices without settings are left out.
    """
    if not devices:
        raise ValueError(f"claim {claim_uid}: a CDI spec needs at least one device")
    spec_edits: dict[str, Any] = {"env": [VISIBLE_DEVICES_VOID, f"{CLAIM_UID_ENV}={claim_uid}"]}
    if device_nodes:
        spec_edits["deviceNodes"] = [
            _char_device("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
            _char_device("/dev/nvidia-uvm", UVM_MAJOR, 0),
            _char_device("/dev/nvidia-uvm-tools", UVM_MAJOR, 1),
        ]
    if plugin_dir is not None:
        spec_edits["mounts"] = smi.spec_mounts(plugin_dir)
    spec: dict[str, Any] = {
        "cdiVersion": EARLIEST_VERSION,
        "kind": kind(driver_name),
        "devices": [
            _device_entry(claim_uid, d, device_nodes, plugin_dir, (settings or {}).get(d.name))
            for d in devices
        ],
        "containerEdits": spec_edits,
    }
    spec["cdiVersion"] = required_version(spec)
    return spec


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
) -> dict[str, Any]:
    prefix = device_env_prefix(device)
    env = [
        f"{prefix}UUID={device.uuid}",
        f"{prefix}DEVICE={device.name}",
        *(settings_env(settings, prefix) if settings else ()),
    ]
    edits: dict[str, Any] = {"env": env}
    if device_nodes:
        edits["deviceNodes"] = [_char_device(f"/dev/nvidia{device.minor}", NVIDIA_MAJOR, device.minor)]
    if plugin_dir is not None:
        edits["mounts"] = smi.device_mounts(plugin_dir, claim_uid, device)
    return {"name": cdi_device_name(claim_uid, device.name), "containerEdits": edits}


def _char_device(path: str, major: int, minor: int) -> dict[str, Any]:
    return {"path": path, "type": "c", "major": major, "minor": minor}


# ---------------------------------------------------------------------------------------------------------
# cdiVersion: the minimum version a spec's content needs (rules of the CDI library's specs-go/version.go).


def _mappings(items: Any) -> list[Mapping[str, Any]]:
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [spec.get("containerEdits")] + [d.get("containerEdits") for d in _mappings(spec.get("devices"))]
    return [e for e in edits if isinstance(e, Mapping)]


def _needs_1_1(spec: Mapping[str, Any]) -> bool:
    return any(
        e.get("netDevices") or any(k in (e.get("intelRdt") or {}) for k in ("schemata", "enableMonitoring"))
        for e in _all_edits(spec)
    )


def _needs_0_7(spec: Mapping[str, Any]) -> bool:
    return any(e.get("intelRdt") is not None or e.get("additionalGids") for e in _all_edits(spec))


def _needs_0_6(spec: Mapping[str, Any]) -> bool:
    if spec.get("annotations") or any(d.get("annotations") for d in _mappings(spec.get("devices"))):
        return True
    kind_value = str(spec.get("kind", ""))
    return "/" in kind_value and "." in kind_value.split("/", 1)[1]


def _needs_0_5(spec: Mapping[str, Any]) -> bool:
    if any(str(d.get("name", ""))[:1] in _DIGITS for d in _mappings(spec.get("devices"))):
        return True
    return any(node.get("hostPath") for e in _all_edits(spec) for node in _mappings(e.get("deviceNodes")))


def _needs_0_4(spec: Mapping[str, Any]) -> bool:
    return any(mount.get("type") for e in _all_edits(spec) for mount in _mappings(e.get("mounts")))


# Newest first: the first rule that matches gives the minimum version.
_VERSION_RULES: tuple[tuple[str, Callable[[Mapping[str, Any]], bool]], ...] = (
    ("1.1.0", _needs_1_1),
    ("0.7.0", _needs_0_7),
    ("0.6.0", _needs_0_6),
    ("0.5.0", _needs_0_5),
    ("0.4.0", _needs_0_4),
)


def required_version(spec: Mapping[str, Any]) -> str:
    """The minimum `cdiVersion` the spec's content needs (`0.5.0` once a device name starts with a digit)."""
    return next((version for version, needs in _VERSION_RULES if needs(spec)), EARLIEST_VERSION)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


# ---------------------------------------------------------------------------------------------------------
# Validation: the CDI rules a runtime would reject a spec for, each problem with its field path.


def validate_spec(spec: Mapping[str, Any]) -> list[str]:
    """Problems that would make the CDI library reject `spec`, as `<field path>: <what>`; empty when valid."""
    problems = _unknown_keys(spec, _SPEC_KEYS, "")
    version = spec.get("cdiVersion")
    if version not in KNOWN_VERSIONS:
        problems.append(f"cdiVersion: {version!r} is not a released CDI spec version")
    elif _version_tuple(str(version)) < _version_tuple(needed := required_version(spec)):
        problems.append(f"cdiVersion: {version} is too old for the content, which needs at least {needed}")

    kind_value = spec.get("kind")
    vendor_part, _, class_part = str(kind_value).partition("/")
    if not isinstance(kind_value, str) or not class_part:
        problems.append(f"kind: {kind_value!r} is not of the form <vendor>/<class>")
    else:
        for label, value in (("vendor", vendor_part), ("class", class_part)):
            if not _VENDOR_OR_CLASS.fullmatch(value):
                problems.append(
                    f"kind: {label} {value!r} must start with a letter, end with a letter or digit and "
                    "contain only letters, digits, '_', '-' and '.'"
                )

    spec_edits = spec.get("containerEdits") or {}
    if isinstance(spec_edits, Mapping):
        problems += _edits_problems(spec_edits, "containerEdits")
    else:
        problems.append("containerEdits: must be a mapping")

    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("devices: a spec needs at least one device")
        return problems
    seen: set[str] = set()
    for i, device in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(device, Mapping):
            problems.append(f"{where}: must be a mapping")
            continue
        problems += _unknown_keys(device, _DEVICE_KEYS, f"{where}.")
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_NAME.fullmatch(name):
            problems.append(
                f"{where}.name: {name!r} must start and end with a letter or digit and contain only "
                "letters, digits, '_', '-', '.' and ':'"
            )
        elif name in seen:
            problems.append(f"{where}.name: duplicate device name {name!r}")
        else:
            seen.add(name)
        edits = device.get("containerEdits")
        if not isinstance(edits, Mapping) or not any(edits.get(key) for key in _EDITS_KEYS):
            problems.append(f"{where}.containerEdits: a device needs non-empty container edits")
        else:
            problems += _edits_problems(edits, f"{where}.containerEdits")
    return problems


def _unknown_keys(obj: Mapping[str, Any], allowed: frozenset[str], prefix: str) -> list[str]:
    return [f"{prefix}{key}: unknown field" for key in obj if key not in allowed]


def _edits_problems(edits: Mapping[str, Any], where: str) -> list[str]:
    problems = _unknown_keys(edits, _EDITS_KEYS, f"{where}.")
    problems += _env_problems(edits.get("env") or [], f"{where}.env")
    for i, node in enumerate(edits.get("deviceNodes") or []):
        path = f"{where}.deviceNodes[{i}]"
        if not isinstance(node, Mapping):
            problems.append(f"{path}: must be a mapping")
            continue
        problems += _unknown_keys(node, _NODE_KEYS, f"{path}.")
        problems += _absolute(node.get("path"), f"{path}.path")
        if "hostPath" in node:
            problems += _absolute(node["hostPath"], f"{path}.hostPath")
        if node.get("type", "") not in _NODE_TYPES:
            problems.append(f"{path}.type: {node.get('type')!r} is not one of b, c, u, p")
        for number in ("major", "minor"):
            value = node.get(number, 0)
            if not isinstance(value, int) or value < 0:
                problems.append(f"{path}.{number}: {value!r} must be a non-negative integer")
        permissions = node.get("permissions", "")
        if permissions != "none" and (not isinstance(permissions, str) or permissions.strip("rwm")):
            problems.append(f"{path}.permissions: {permissions!r} must be a combination of r, w, m or 'none'")
    for i, mount in enumerate(edits.get("mounts") or []):
        path = f"{where}.mounts[{i}]"
        if not isinstance(mount, Mapping):
            problems.append(f"{path}: must be a mapping")
            continue
        problems += _unknown_keys(mount, _MOUNT_KEYS, f"{path}.")
        if not mount.get("hostPath") or not isinstance(mount.get("hostPath"), str):
            problems.append(f"{path}.hostPath: {mount.get('hostPath')!r} must be a non-empty string")
        problems += _absolute(mount.get("containerPath"), f"{path}.containerPath")
    for i, hook in enumerate(edits.get("hooks") or []):
        path = f"{where}.hooks[{i}]"
        if not isinstance(hook, Mapping):
            problems.append(f"{path}: must be a mapping")
            continue
        problems += _unknown_keys(hook, _HOOK_KEYS, f"{path}.")
        if hook.get("hookName") not in _HOOK_NAMES:
            problems.append(f"{path}.hookName: {hook.get('hookName')!r} is not an OCI hook name")
        problems += _absolute(hook.get("path"), f"{path}.path")
        problems += _env_problems(hook.get("env") or [], f"{path}.env")
    return problems


def _env_problems(env: Sequence[Any], where: str) -> list[str]:
    return [
        f"{where}[{i}]: {entry!r} is not of the form KEY=VALUE"
        for i, entry in enumerate(env)
        if not isinstance(entry, str) or entry.find("=") <= 0
    ]


def _absolute(value: Any, where: str) -> list[str]:
    if isinstance(value, str) and value.startswith("/"):
        return []
    return [f"{where}: {value!r} must be an absolute path"]


# ---------------------------------------------------------------------------------------------------------
# Files.


def spec_path(cdi_root: Path, claim_uid: str, *, driver_name: str) -> Path:
    """`<cdi_root>/<vendor>-<class>_<claimUID>.yaml` (the CDI library's transient spec name)."""
    # Defence in depth: callers validate UIDs, but nothing here may ever name a file outside cdi_root.
    if not claim_uid or "/" in claim_uid or "\0" in claim_uid:
        raise ValueError(f"claim UID {claim_uid!r} cannot be part of a CDI spec file name")
    return cdi_root / f"{vendor(driver_name)}-{CLAIM_CLASS}_{claim_uid}.yaml"


def spec_text(spec: Mapping[str, Any], path: Path | None = None) -> str:
    """`spec` as YAML; a ValueError (naming `path`, the file it is for) when the CDI library would reject
    it."""
    problems = validate_spec(spec)
    if problems:
        raise ValueError(
            f"refusing to write invalid CDI spec {path or ''}".rstrip() + ": " + "; ".join(problems)
        )
    return yaml.dump(dict(spec), Dumper=_DUMPER, sort_keys=False)


def write_spec(path: Path, spec: Mapping[str, Any]) -> None:
    """Write `spec` as YAML (mode 0644) atomically; refuses specs the CDI library would reject."""
    write_spec_text(path, spec_text(spec, path))


def write_spec_text(path: Path, text: str) -> None:
    write_atomic(path, text.encode(), mode=SPEC_FILE_MODE, sync=False)  # lives for one boot


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
    stand_in = _STAND_IN_UIDS[claim_uid[0] in _DIGITS]
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
    for device in _mappings(upgraded.get("devices")):
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


def remove_spec(path: Path) -> bool:
    """Remove a spec file; False when it was already gone."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


class SpecFiles:
    """The claim specs of `driver_name` in `cdi_root`, one file per claim (`spec_path`): every driver's."""

    def __init__(self, cdi_root: Path, driver_name: str) -> None:
        self.root = cdi_root
        self._driver = driver_name

    def claim_path(self, claim_uid: str) -> Path:
        return spec_path(self.root, claim_uid, driver_name=self._driver)

    def write_claim(self, claim_uid: str, spec: Mapping[str, Any]) -> None:
        write_spec(self.claim_path(claim_uid), spec)

    def write_claim_text(self, claim_uid: str, text: str) -> None:
        """Write a claim's spec text (`claim_spec_text`: checked when it was made)."""
        write_spec_text(self.claim_path(claim_uid), text)

    def remove_claim(self, claim_uid: str) -> bool:
        """False when it was already gone."""
        return remove_spec(self.claim_path(claim_uid))
