"""kubectl against one cluster: a local cluster's admin kubeconfig and discovery cache, or any kubeconfig."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fakeplugin.cluster import binaries
from fakeplugin.cluster.state import ClusterError

DEFAULT_TIMEOUT = 60.0
TIMEOUT_MARGIN = 30.0  # kubectl's start and its last request after its own --timeout ran out
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def process_timeout(args: Sequence[str]) -> float:
    """How long kubectl with `args` may run: its own `--timeout=<Go duration>` (a wait, a delete) and a
    margin, so that the process is never cut before kubectl's wait is over; else DEFAULT_TIMEOUT."""
    for arg in args:
        if arg.startswith("--timeout="):
            text = arg.removeprefix("--timeout=")
            parts = _DURATION_PART.findall(text)
            if parts and "".join(n + u for n, u in parts) == text:
                return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts) + TIMEOUT_MARGIN
    return DEFAULT_TIMEOUT


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
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`timeout` (seconds) bounds the process; None: kubectl's own `--timeout=` and a margin, else 60."""
        cache = [f"--cache-dir={self._cache_dir}"] if self._cache_dir is not None else []
        argv = [str(self._binary()), f"--kubeconfig={self._kubeconfig}", *cache, *args]
        result = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            text=True,
            timeout=process_timeout(args) if timeout is None else timeout,
            check=False,
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
