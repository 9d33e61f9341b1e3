"""Fault injection for tests: set and clear the annotations the plugin reads on claims and nodes.

This module only annotates objects (kubectl annotate); what the plugin does with each annotation is in
README.md's fault table (fakeplugin.prepare.claimfaults, fakeplugin.publish.devicefaults). Values are passed
through as strings.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Mapping

from fakeplugin.prepare.claimfaults import (
    CLAIM_ANNOTATIONS,
    PREFIX,
    PREPARE_DELAY,
    PREPARE_ERROR,
    PREPARE_FAIL_COUNT,
    UNPREPARE_ERROR,
)
from fakeplugin.publish.devicefaults import ANNOTATION as DEVICE_FAULTS

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


class Faults:
    """Claim faults (`fakeplugin.dev/prepare-error`, `-fail-count`, `-delay`, `unprepare-error`) and node
    faults (`fakeplugin.dev/device-faults`), as annotations on the objects."""

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
        """Unprepare of the claim fails with `message`."""
        self.annotate_claim(namespace, claim, {UNPREPARE_ERROR: message})

    def clear_claim(self, namespace: str, claim: str) -> None:
        """Remove every fault annotation from the claim."""
        self.annotate_claim(namespace, claim, dict.fromkeys(CLAIM_ANNOTATIONS))

    def set_device_faults(self, node: str, faults: str) -> None:
        """Annotate the node with `fakeplugin.dev/device-faults: <faults>`."""
        self.annotate("node", node, None, {DEVICE_FAULTS: faults})

    def clear_node(self, node: str) -> None:
        """Remove the node's device faults annotation."""
        self.annotate("node", node, None, {DEVICE_FAULTS: None})

    def claim_faults(self, namespace: str, claim: str) -> dict[str, str]:
        """The claim's fault annotations now set."""
        return self._ours("resourceclaim", claim, namespace)

    def node_faults(self, node: str) -> dict[str, str]:
        """The node's fault annotations now set."""
        return self._ours("node", node, None)

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
