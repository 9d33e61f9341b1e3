"""What each container of a pod on a simulated node would have received: the record a container runtime
with CDI would produce, in the fake CRI's record format (fakeplugin.cluster.crirecords reads both).

CDI resolution as the CDI library applies it (tags.cncf.io/container-device-interface, pkg/cdi
container-edits.go): for each requested device, its spec's spec-level edits (once per spec) and then the
device's own edits; env entries replace an earlier entry of the same name, mounts and device nodes add up.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

import yaml

from fakeplugin.atomicfile import write_atomic

try:
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader
except AttributeError:  # PyYAML without libyaml
    _Loader = yaml.SafeLoader


def load_devices(
    cdi_root: Path, names: Set[str] | None = None
) -> dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Fully qualified CDI device ID (`vendor/class=name`) → (its spec, its device entry); with `names`,
    only from the specs whose text holds one of those device names. A spec that defines a device holds
    its name as written (CDI names need no quoting or escaping in YAML or JSON), so nothing asked for is
    missed; the others, on a node with many claims prepared, are not parsed (issue 32: parsing every spec
    of the node for each container was an eighth of the fleet's CPU in a wave)."""
    devices: dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]] = {}
    for path in sorted(cdi_root.glob("*.yaml")) + sorted(cdi_root.glob("*.json")):
        try:
            text = path.read_text()
            if names is not None and not any(n in text for n in names):
                continue
            spec = yaml.load(text, Loader=_Loader)
        except (OSError, yaml.YAMLError):
            continue  # removed meanwhile (Unprepare), or someone else's broken file: the runtime skips it too
        if not isinstance(spec, dict):
            continue
        for device in spec.get("devices") or []:
            devices[f"{spec.get('kind')}={device.get('name')}"] = (spec, device)
    return devices


def resolve(
    cdi_ids: Sequence[str], base_env: Sequence[str], cdi_root: Path
) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(env, mounts, device nodes, errors) of a container asking for `cdi_ids`."""
    known = load_devices(cdi_root, {i.split("=", 1)[-1] for i in cdi_ids}) if cdi_ids else {}
    env = {e.split("=", 1)[0]: e for e in base_env}
    mounts: list[dict[str, Any]] = []
    nodes: list[dict[str, Any]] = []
    errors: list[str] = []
    applied: set[int] = set()

    def apply(edits: Mapping[str, Any] | None) -> None:
        for entry in (edits or {}).get("env") or []:
            env[entry.split("=", 1)[0]] = entry
        mounts.extend(
            {
                "destination": m["containerPath"],
                "type": m.get("type", "bind"),
                "source": m["hostPath"],
                "options": list(m.get("options") or []),
            }
            for m in (edits or {}).get("mounts") or []
        )
        nodes.extend(dict(d) for d in (edits or {}).get("deviceNodes") or [])

    for cdi_id in cdi_ids:
        if cdi_id not in known:
            errors.append(f"unresolvable CDI devices {cdi_id}")
            continue
        spec, device = known[cdi_id]
        if id(spec) not in applied:
            applied.add(id(spec))
            apply(spec.get("containerEdits"))
        apply(device.get("containerEdits"))
    return list(env.values()), mounts, nodes, errors


def write_record(
    directory: Path,
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    cdi_ids: Sequence[str],
    cdi_root: Path,
) -> None:
    """<directory>/<namespace>_<pod>_<container>.json, as the fake CRI writes it for kubelet nodes."""
    meta = pod["metadata"]
    base_env = [
        f"{e['name']}={e.get('value', '')}" for e in container.get("env") or [] if "valueFrom" not in e
    ]
    env, mounts, nodes, errors = resolve(cdi_ids, base_env, cdi_root)
    record: dict[str, Any] = {
        "podNamespace": meta["namespace"],
        "podName": meta["name"],
        "podUID": meta["uid"],
        "container": container["name"],
        "attempt": 0,
        "createdAt": datetime.datetime.now(datetime.UTC).isoformat(),
        "cdiDevices": list(cdi_ids),
        "env": env,
        "mounts": mounts,
        "deviceNodes": nodes,
    }
    if errors:
        record["error"] = "; ".join(errors)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomic(
        directory / record_name(meta["namespace"], meta["name"], container["name"]),
        json.dumps(record, indent=2).encode(),
        mode=0o644,
        sync=False,
    )


def record_name(namespace: str, pod: str, container: str) -> str:
    """<namespace>_<pod>_<container>.json (names cannot hold "_"); the fake CRI names its records so too
    (hack/fakecri/main.go writeRecord)."""
    return f"{namespace}_{pod}_{container}.json"
