"""`--gpu-clique-label-enabled`: the plugin keeps `nvidia.com/gpu.clique=<cliqueID>` on its own node, the
label GPU Feature Discovery used to set (schedulers use it for affinity).

As `cmd/compute-domain-kubelet-plugin/computedomain.go` on main (95932046; commits d6ed11e5, 8ae81548;
not in v25.12.0 or v0.4.1) does it:
- `SetGPUCliqueLabel` when the plugin starts (after its informer synced): a merge patch of the label;
  nothing without a clique ID; an error stops the start (`error setting nvidia.com/gpu.clique node label:
  error patching node with label nvidia.com/gpu.clique: ...`);
- `refreshGPUCliqueID` (every 10 min upstream; here as soon as the inventory or the node's labels give
  another clique ID): a new non-empty clique ID is labelled, an empty one leaves the label as it is;
  errors are logged;
- `RemoveGPUCliqueLabel` at stop (a merge patch setting it to null; errors logged).
"""

from __future__ import annotations

import logging

from fakeplugin.apis.computedomain import GPU_CLIQUE_LABEL
from fakeplugin.drivers.computedomain.domains import DomainApi

log = logging.getLogger(__name__)


class LabelError(Exception):
    """The label could not be set at start: the plugin does not start."""


class CliqueLabel:
    """The `nvidia.com/gpu.clique` label of node `node_name`, written through `api`."""

    def __init__(self, api: DomainApi, node_name: str) -> None:
        self._api, self._node = api, node_name

    def set(self, clique_id: str) -> None:
        """At start; LabelError with upstream's text when the patch fails."""
        try:
            self._patch(clique_id)
        except Exception as e:
            raise LabelError(
                f"error setting {GPU_CLIQUE_LABEL} node label: error patching node with label "
                f"{GPU_CLIQUE_LABEL}: {e}"
            ) from e

    def refresh(self, clique_id: str) -> None:
        """The clique ID changed under a running plugin."""
        try:
            self._patch(clique_id)
        except Exception as e:
            log.error(
                "error refreshing %s node label: error updating %s node label: error patching node with "
                "label %s: %s",
                GPU_CLIQUE_LABEL,
                GPU_CLIQUE_LABEL,
                GPU_CLIQUE_LABEL,
                e,
            )

    def remove(self) -> None:
        """At stop."""
        try:
            self._api.patch_node_labels(self._node, {GPU_CLIQUE_LABEL: None}, resource_version="")
        except Exception as e:
            log.error(
                "error removing %s node label: error removing Node label %s: %s",
                GPU_CLIQUE_LABEL,
                GPU_CLIQUE_LABEL,
                e,
            )
            return
        log.info("node %s: removed label %s", self._node, GPU_CLIQUE_LABEL)

    def _patch(self, clique_id: str) -> None:
        if not clique_id:  # no clique (no fabric, or not attached): the label is left as it is
            return
        self._api.patch_node_labels(self._node, {GPU_CLIQUE_LABEL: clique_id}, resource_version="")
        log.info("node %s: labelled %s=%s", self._node, GPU_CLIQUE_LABEL, clique_id)
