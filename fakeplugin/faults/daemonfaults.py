"""A node's ComputeDomain daemon faults, node annotations for test authors (docs/faults.md): while
NOT_READY_ANNOTATION is set, the node's IMEX daemon stays NotReady; while LEFT_CLIQUE_ANNOTATION is set, it
removes its entry from the clique (the node leaves it) until the annotation goes, when it enters again as a
new daemon does. Neither is NVIDIA's: its daemon leaves only when it stops (docs/compute-domains.md).
FAILED_ANNOTATION (the node's daemons failed, a daemon that cannot start at all) is read by the controller
with --binding-conditions (fakeplugin.drivers.computedomain.controller.binding). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOT_READY_ANNOTATION = "fakeplugin.dev/compute-domain-daemon-not-ready"
LEFT_CLIQUE_ANNOTATION = "fakeplugin.dev/compute-domain-daemon-left-clique"
# The node's daemons failed (value: a reason): a daemon that cannot start at all, not one slow to become
# Ready (NOT_READY_ANNOTATION).
FAILED_ANNOTATION = "fakeplugin.dev/compute-domain-daemon-failed"


def not_ready_fault(node: Mapping[str, Any]) -> str:
    """The node's NOT_READY_ANNOTATION ("" when absent): while set, the daemon stays NotReady."""
    return ((node.get("metadata") or {}).get("annotations") or {}).get(NOT_READY_ANNOTATION, "")


def left_clique_fault(node: Mapping[str, Any]) -> str:
    """The node's LEFT_CLIQUE_ANNOTATION ("" when absent): while set, the daemon has no clique entry."""
    return ((node.get("metadata") or {}).get("annotations") or {}).get(LEFT_CLIQUE_ANNOTATION, "")


def node_faults(node: Mapping[str, Any]) -> tuple[str, str]:
    """Both daemon faults of the node: (not ready, left the clique)."""
    return not_ready_fault(node), left_clique_fault(node)
