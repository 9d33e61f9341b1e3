"""kubectl against one local cluster: its admin kubeconfig, its own discovery cache."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

from fakeplugin.cluster import binaries
from fakeplugin.cluster.layout import StateLayout
from fakeplugin.cluster.state import ClusterError


class Kubectl:
    """Runs kubectl; with `check`, a failure raises ClusterError with its stderr."""

    def __init__(self, layout: StateLayout) -> None:
        self._layout = layout

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        argv = [
            str(binaries.find("kubectl")),
            f"--kubeconfig={self._layout.kubeconfig}",
            f"--cache-dir={self._layout.kubectl_cache}",
            *args,
        ]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def send(self, verb: str, objects: Sequence[dict[str, Any]]) -> None:
        """`kubectl <verb> -f -` (create, apply) of objects, as one List."""
        self(verb, "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))

    def items(self, resource: str) -> list[dict[str, Any]] | None:
        """The objects of `resource`, or None while the API server does not answer."""
        out = self("get", resource, "-o", "json", check=False)
        return json.loads(out.stdout)["items"] if out.returncode == 0 else None
