"""kubectl against one cluster: a local cluster's admin kubeconfig and discovery cache, or any kubeconfig."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fakeplugin.cluster import binaries
from fakeplugin.cluster.state import ClusterError


class Kubectl:
    """Runs kubectl; with `check`, a failure raises ClusterError with its stderr. `binary` finds the
    kubectl to run (default: ours, fakeplugin.cluster.binaries), when it is first needed."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        cache_dir: Path | None = None,
        binary: Callable[[], Path] = lambda: binaries.find("kubectl"),
    ) -> None:
        self._kubeconfig = kubeconfig
        self._cache_dir = cache_dir
        self._binary = binary

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        cache = [f"--cache-dir={self._cache_dir}"] if self._cache_dir is not None else []
        argv = [str(self._binary()), f"--kubeconfig={self._kubeconfig}", *cache, *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def send(
        self,
        verb: str,
        objects: Sequence[dict[str, Any]],
        *,
        timeout: float = 60.0,
        server_side: bool = False,
    ) -> None:
        """`kubectl <verb> -f -` (create, apply) of objects, as one List; `server_side`: apply them
        server-side (objects too large for the last-applied annotation, such as big CRDs)."""
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self(verb, *(["--server-side"] if server_side else []), "-f", "-", input=body, timeout=timeout)

    def items(self, resource: str) -> list[dict[str, Any]] | None:
        """The objects of `resource`, or None while the API server does not answer."""
        out = self("get", resource, "-o", "json", check=False)
        return json.loads(out.stdout)["items"] if out.returncode == 0 else None
