"""The Container Device Interface as every driver of ours writes it: one transient spec file per claim,
checked against the CDI library's rules before it is written (tags.cncf.io/container-device-interface,
specs-go/config.go and version.go, pkg/parser), written and removed atomically.

Names: a claim's spec is `<cdi_root>/k8s.<driver>-claim_<claimUID>.yaml`, kind `k8s.<driver>/claim`, and
its devices are named `<claimUID>-<deviceName>`, so the kubelet hands the runtime
`k8s.<driver>/claim=<claimUID>-<deviceName>` (`cdi_device_id`). What a driver puts in a spec is its own
(fakeplugin.drivers.gpu.prepare.cdispec, fakeplugin.drivers.computedomain.cdispec).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic

# libyaml's emitter when PyYAML has it (its wheels do): same YAML, a fifth of the time on Prepare's path.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

CLAIM_CLASS = "claim"
SPEC_FILE_MODE = 0o644

# Spec-level env. The real driver's NVIDIA_VISIBLE_DEVICES: CDI injects the devices, and `void` keeps the
# NVIDIA runtime (and a base image's `all`) from adding any.
VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"

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


def char_device(path: str, major: int, minor: int) -> dict[str, Any]:
    return {"path": path, "type": "c", "major": major, "minor": minor}


# ---------------------------------------------------------------------------------------------------------
# cdiVersion: the minimum version a spec's content needs (rules of the CDI library's specs-go/version.go).


def mappings(items: Any) -> list[Mapping[str, Any]]:
    return [item for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [spec.get("containerEdits")] + [d.get("containerEdits") for d in mappings(spec.get("devices"))]
    return [e for e in edits if isinstance(e, Mapping)]


def _needs_1_1(spec: Mapping[str, Any]) -> bool:
    return any(
        e.get("netDevices") or any(k in (e.get("intelRdt") or {}) for k in ("schemata", "enableMonitoring"))
        for e in _all_edits(spec)
    )


def _needs_0_7(spec: Mapping[str, Any]) -> bool:
    return any(e.get("intelRdt") is not None or e.get("additionalGids") for e in _all_edits(spec))


def _needs_0_6(spec: Mapping[str, Any]) -> bool:
    if spec.get("annotations") or any(d.get("annotations") for d in mappings(spec.get("devices"))):
        return True
    kind_value = str(spec.get("kind", ""))
    return "/" in kind_value and "." in kind_value.split("/", 1)[1]


def _needs_0_5(spec: Mapping[str, Any]) -> bool:
    if any(str(d.get("name", ""))[:1] in _DIGITS for d in mappings(spec.get("devices"))):
        return True
    return any(node.get("hostPath") for e in _all_edits(spec) for node in mappings(e.get("deviceNodes")))


def _needs_0_4(spec: Mapping[str, Any]) -> bool:
    return any(mount.get("type") for e in _all_edits(spec) for mount in mappings(e.get("mounts")))


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
        """Write a claim's spec text, checked by `spec_text` when it was made (a driver may keep it)."""
        write_spec_text(self.claim_path(claim_uid), text)

    def remove_claim(self, claim_uid: str) -> bool:
        """False when it was already gone."""
        return remove_spec(self.claim_path(claim_uid))
