"""Fault injection for tests: set and clear the annotations the plugin reads on claims and nodes.

This module only annotates objects (kubectl annotate); what the plugin does with each annotation is in
docs/faults.md's table (fakeplugin.faults.claimfaults, fakeplugin.faults.devicefaults,
fakeplugin.faults.fabricfaults, fakeplugin.faults.daemonfaults). Values are passed through as strings.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping

from fakeplugin.faults.claimfaults import (
    CLAIM_ANNOTATIONS,
    PREFIX,
    PREPARE_DELAY,
    PREPARE_ERROR,
    PREPARE_FAIL_COUNT,
    UNPREPARE_ERROR,
    UNPREPARE_FAULTS,
)
from fakeplugin.faults.daemonfaults import FAILED_ANNOTATION, LEFT_CLIQUE_ANNOTATION, NOT_READY_ANNOTATION
from fakeplugin.faults.devicefaults import ANNOTATION as DEVICE_FAULTS
from fakeplugin.faults.fabricfaults import ANNOTATION as FABRIC_STATE
from fakeplugin.telemetry.load import ANNOTATION as GPU_LOAD
from fakeplugin.telemetry.load import format_load

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
LOAD_KINDS = {"pod": "pod", "claim": "resourceclaim"}  # set_gpu_load's kinds → kubectl's
COMPUTE_DOMAIN_FAULTS = (FABRIC_STATE, NOT_READY_ANNOTATION, LEFT_CLIQUE_ANNOTATION, FAILED_ANNOTATION)
# Every fault a node can carry (the methods below that annotate a node).
NODE_FAULTS = (UNPREPARE_FAULTS, DEVICE_FAULTS, *COMPUTE_DOMAIN_FAULTS)


class Faults:
    """Claim faults (`fakeplugin.dev/prepare-error`, `-fail-count`, `-delay`, `unprepare-error`) and node
    faults (`fakeplugin.dev/device-faults`; ComputeDomain ones: `fakeplugin.dev/fabric-state`,
    `compute-domain-daemon-not-ready`, `compute-domain-daemon-left-clique`,
    `compute-domain-daemon-failed`), as annotations on the objects."""

    def __init__(self, kubectl: Kubectl) -> None:
        self._kubectl = kubectl

    def fail_prepare(self, namespace: str, claim: str, message: str, *, times: int | None = None) -> None:
        """Prepare of the claim fails with `message` (only its first `times` attempts, when given)."""
        values = {PREPARE_ERROR: message, PREPARE_FAIL_COUNT: None if times is None else str(times)}
        self.annotate_claim(namespace, claim, values)

    def delay_prepare(self, namespace: str, claim: str, delay: str) -> None:
        """Prepare of the claim takes `delay` longer (e.g. "10s")."""
        self.annotate_claim(namespace, claim, {PREPARE_DELAY: delay})

    def fail_unprepare(self, namespace: str, claim: str, message: str) -> None:
        """Unprepare of the claim fails with `message`: set before its Prepare, or on a node that reads
        every Unprepare's claim (`read_unprepare_faults`)."""
        self.annotate_claim(namespace, claim, {UNPREPARE_ERROR: message})

    def read_unprepare_faults(self, node: str, enabled: bool = True) -> None:
        """The node's plugin reads every claim's unprepare-error at Unprepare (`fakeplugin.dev/unprepare-
        faults`), so `fail_unprepare` after Prepare applies there; `enabled=False` removes it."""
        self.annotate("node", node, None, {UNPREPARE_FAULTS: "true" if enabled else None})

    def clear_claim(self, namespace: str, claim: str) -> None:
        """Remove every fault annotation from the claim."""
        self.annotate_claim(namespace, claim, dict.fromkeys(CLAIM_ANNOTATIONS))

    def set_device_faults(self, node: str, faults: str) -> None:
        """Annotate the node with `fakeplugin.dev/device-faults: <faults>`."""
        self.annotate("node", node, None, {DEVICE_FAULTS: faults})

    def clear_node(self, node: str) -> None:
        """Remove the node's device faults annotation."""
        self.annotate("node", node, None, {DEVICE_FAULTS: None})

    def set_fabric_state(self, node: str, state: str) -> None:
        """The node's GPUs report this NVLink fabric registration (`fakeplugin.dev/fabric-state`: e.g.
        "InProgress", "gpu-1=Completed:ERROR_TIMEOUT"); the compute-domain plugin reads it at its start."""
        self.annotate("node", node, None, {FABRIC_STATE: state})

    def daemon_not_ready(self, node: str, reason: str = "test") -> None:
        """The node's ComputeDomain daemons stay NotReady in their cliques."""
        self.annotate("node", node, None, {NOT_READY_ANNOTATION: reason})

    def leave_clique(self, node: str, reason: str = "test") -> None:
        """The node's ComputeDomain daemons remove their clique entries (until `clear_compute_domain`)."""
        self.annotate("node", node, None, {LEFT_CLIQUE_ANNOTATION: reason})

    def daemon_failed(self, node: str, reason: str = "test") -> None:
        """The node's ComputeDomain daemons failed: with the controller's --binding-conditions, channel
        claims allocated there get ComputeDomainDaemonFailed=True (docs/compute-domains.md)."""
        self.annotate("node", node, None, {FAILED_ANNOTATION: reason})

    def clear_compute_domain(self, node: str) -> None:
        """Remove the node's fabric and ComputeDomain daemon faults."""
        self.annotate("node", node, None, dict.fromkeys(COMPUTE_DOMAIN_FAULTS))

    def set_gpu_load(
        self, kind: str, namespace: str, name: str, utilization: int, memory: int | None = None
    ) -> None:
        """The GPU load telemetry shows (`fakeplugin.dev/gpu-load`) for the devices of a claim (`kind`
        "claim") or of every claim a pod uses ("pod"; a claim's own load wins): `utilization` and `memory`
        (framebuffer used; default: as utilization) in percent, 0 to 100 (LoadError otherwise)."""
        self.annotate(_load_kind(kind), name, namespace, {GPU_LOAD: format_load(utilization, memory)})

    def clear_gpu_load(self, kind: str, namespace: str, name: str) -> None:
        """Remove the load of a claim or pod (`set_gpu_load`): its devices look idle."""
        self.annotate(_load_kind(kind), name, namespace, {GPU_LOAD: None})

    def claim_faults(self, namespace: str, claim: str) -> dict[str, str]:
        """The claim's fault annotations now set."""
        return self._ours("resourceclaim", claim, namespace)

    def node_faults(self, node: str) -> dict[str, str]:
        """The node's fault annotations now set (NODE_FAULTS: not fakeplugin's bookkeeping on the node, such
        as the keys of the labels it gave)."""
        return {k: v for k, v in self._ours("node", node, None).items() if k in NODE_FAULTS}

    def annotate_claim(self, namespace: str, claim: str, values: Mapping[str, str | None]) -> None:
        """Set (or, for None values, remove) annotations of a claim."""
        self.annotate("resourceclaim", claim, namespace, values)

    def annotate(self, kind: str, name: str, namespace: str | None, values: Mapping[str, str | None]) -> None:
        """Set annotations (a None value removes that key; removing an absent one is fine)."""
        args = [f"{k}={v}" if v is not None else f"{k}-" for k, v in values.items()]
        where = ["-n", namespace] if namespace else []
        self._kubectl("annotate", "--overwrite", kind, name, *where, *args)

    def _ours(self, kind: str, name: str, namespace: str | None) -> dict[str, str]:
        where = ["-n", namespace] if namespace else []
        obj = json.loads(self._kubectl("get", kind, name, *where, "-o", "json").stdout)
        annotations = obj["metadata"].get("annotations") or {}
        return {k: v for k, v in annotations.items() if k.startswith(PREFIX)}


def _load_kind(kind: str) -> str:
    if kind not in LOAD_KINDS:
        raise ValueError(f"gpu load: kind {kind!r}: one of {', '.join(LOAD_KINDS)}")
    return LOAD_KINDS[kind]
