"""Kueue's Configuration for a manager the local cluster runs on loopback, outside any Pod (pure).

A user's file (`--with kueue=FILE`; default examples/kueue/config.yaml) is checked to be a Kueue
Configuration with well-formed DRA mappings, then the fields such a manager needs are set over it
(`local_config`), each one that changes a value the user gave reported so it can be logged:

- `webhook.host/port/certDir`: served on 127.0.0.1 with our certificate (the API server calls it by URL);
- `internalCertManagement.enable: false`: Kueue's own rotation writes a certificate for its Service's DNS
  name, which nothing on loopback resolves;
- `health.healthProbeBindAddress` on loopback (we wait on /readyz), `metrics.bindAddress: "0"` (off);
- `leaderElection.leaderElect: false`: one manager;
- feature gate `VisibilityOnDemand` off: its API server reads certificates from the fixed path /visibility
  (pkg/visibility/server.go), which we do not create on the host.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakeplugin.yamlschema import Limits, SchemaError, parse_yaml, read_document

API_GROUP = "config.kueue.x-k8s.io"
API_VERSIONS = (f"{API_GROUP}/v1beta1", f"{API_GROUP}/v1beta2")
KIND = "Configuration"
LIMITS = Limits(max_bytes=1 << 20, max_depth=32, max_nodes=100_000)
DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "examples" / "kueue" / "config.yaml"
UNSERVED_GATES = {"VisibilityOnDemand": "its API server reads certificates from /visibility on the host"}


class KueueConfigError(SchemaError):
    """A file given as Kueue's Configuration is not one; one line per problem, naming the file."""


@dataclass(frozen=True)
class Endpoints:
    """Where the manager listens and finds its webhook certificate."""

    host: str
    webhook_port: int
    health_port: int
    cert_dir: Path


def load_config(path: Path) -> dict[str, Any]:
    """The Configuration in `path`, checked (see check_config)."""
    source = str(path)
    data = parse_yaml(read_document(path, source, KueueConfigError, LIMITS), source, KueueConfigError, LIMITS)
    check_config(data, source)
    return data


def check_config(data: Any, source: str) -> None:
    """KueueConfigError unless `data` is a Kueue Configuration whose DRA mappings are well formed and
    which asks for nothing a loopback manager cannot serve."""
    problems: list[str] = []

    def add(path: str, problem: str) -> None:
        problems.append(f"{source}: {path}: {problem}")

    if not isinstance(data, dict):
        raise KueueConfigError([f"{source}: (top level): expected a Kueue Configuration (a mapping)"])
    if data.get("apiVersion") not in API_VERSIONS or data.get("kind") != KIND:
        add(
            "apiVersion/kind",
            f"got {data.get('apiVersion')!r}/{data.get('kind')!r}; a Kueue Configuration is "
            f"{' or '.join(API_VERSIONS)} / {KIND}",
        )
    gates = data.get("featureGates") or {}
    if not isinstance(gates, dict):
        add("featureGates", "expected a mapping of gate name to true/false")
        gates = {}
    for gate, why in UNSERVED_GATES.items():
        if gates.get(gate) is True:
            add(f"featureGates.{gate}", f"cannot be on for a manager outside a Pod: {why}")
    mappings = (data.get("resources") or {}).get("deviceClassMappings") or []
    if not isinstance(mappings, list):
        add("resources.deviceClassMappings", "expected a list")
        mappings = []
    for i, m in enumerate(mappings):
        path = f"resources.deviceClassMappings[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m["name"]:
            add(
                f"{path}.name", "every mapping needs a name: the logical resource ClusterQueues give quota in"
            )
            continue
        classes = m.get("deviceClassNames")
        if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
            add(f"{path}.deviceClassNames", "expected a non-empty list of DeviceClass names")
    if problems:
        raise KueueConfigError(problems)


def local_config(user: dict[str, Any], at: Endpoints) -> tuple[dict[str, Any], list[str]]:
    """`user` with the fields of a loopback manager set over it, and a line per value of the user's that
    changed (`field: was → now`)."""
    config = copy.deepcopy(user)
    changed: list[str] = []

    def put(path: str, value: Any) -> None:
        *parents, leaf = path.split(".")
        node = config
        for key in parents:
            node = node.setdefault(key, {})
        if leaf in node and node[leaf] != value:
            changed.append(f"{path}: {node[leaf]!r} → {value!r}")
        node[leaf] = value

    put("webhook.host", at.host)
    put("webhook.port", at.webhook_port)
    put("webhook.certDir", str(at.cert_dir))
    put("internalCertManagement.enable", False)
    put("health.healthProbeBindAddress", f"{at.host}:{at.health_port}")
    put("metrics.bindAddress", "0")
    put("leaderElection.leaderElect", False)
    for gate in UNSERVED_GATES:
        put(f"featureGates.{gate}", False)
    return config, changed
