"""What one container received (env, CDI devices, mounts), and running a command in its view.

Two sources: a local cluster's fake CRI records (no real container exists: `run` replays the record's
mounts and runs a mounted script there, see fakeplugin.cluster.crirecords), or a real cluster such as
kind, where `kubectl exec` asks the container itself.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fakeplugin.fleet.podclaims import container_claim_refs
from fakeplugin.testing.objects import container_gpus

Runner = Callable[[list[str]], subprocess.CompletedProcess[str]]
# Where a command without a path is looked for in a local container's mounts (its only files).
SEARCH_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


@dataclass(frozen=True)
class ContainerView:
    """What a container received: `env` (name → value), `cdi_devices` (fully qualified CDI device IDs),
    `mounts` (dicts with at least `destination` and `source`); `run` runs a command as it would see it;
    `device_nodes`: the paths of the device nodes its CDI devices add (a local cluster's record; empty from a
    real cluster, where the runtime's own /dev entries cannot be told apart)."""

    namespace: str
    pod: str
    name: str
    env: dict[str, str]
    cdi_devices: list[str]
    mounts: list[dict[str, Any]]
    _runner: Runner = field(repr=False, compare=False)
    device_nodes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> dict[str, str]:
        """Device name → UUID of each GPU or MIG device the container got (exactly its requests' devices),
        from the env its CDI devices set."""
        return container_gpus(self.env)

    def run(self, command: str | Sequence[str]) -> subprocess.CompletedProcess[str]:
        """Run `command` ("nvidia-smi -L" or an argv) in the container's view; never raises for its
        exit status: check `.returncode`, `.stdout`, `.stderr`."""
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("empty command")
        return self._runner(argv)


def local_view(cluster: Any, namespace: str, pod: str, container: str) -> ContainerView:
    """From a local cluster (fakeplugin.cluster.Cluster): the fake CRI's record of the container."""
    record = cluster.container_record(namespace, pod, container)
    mounts = list(record.get("mounts") or [])
    targets = {m["destination"] for m in mounts}

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        program = argv[0]
        if not program.startswith("/"):
            found = [f"{d}/{program}" for d in SEARCH_PATH if f"{d}/{program}" in targets]
            if not found:
                raise FileNotFoundError(
                    f"{program}: not mounted into {namespace}/{pod}/{container} (a local cluster's "
                    "containers have no image: only files their CDI devices mount run; "
                    f"mounted: {sorted(targets)})"
                )
            program = found[0]
        return cluster.run_in_container_view(namespace, pod, container, program, *argv[1:])

    return ContainerView(
        namespace,
        pod,
        container,
        dict(item.split("=", 1) for item in record.get("env") or []),
        list(record.get("cdiDevices") or []),
        mounts,
        run,
        [d["path"] for d in record.get("deviceNodes") or []],
    )


def exec_view(kubectl: Callable[..., subprocess.CompletedProcess[str]], namespace: str, pod: str,
              container: str, cdi_devices: list[str]) -> ContainerView:  # fmt: skip
    """From a real cluster: env and mounts as the running container shows them (`kubectl exec`; its image
    needs `env` and `cat`). CDI IDs are not visible inside a container: the caller derives them from the
    pod's allocated claims."""

    def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
        return kubectl("exec", "-n", namespace, pod, "-c", container, "--", *argv, check=False)

    def output(argv: list[str]) -> str:
        result = run(argv)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in {namespace}/{pod}/{container} failed: {result.stderr}")
        return result.stdout

    env = dict(line.split("=", 1) for line in output(["env"]).splitlines() if "=" in line)
    mounts = [
        {"source": fields[0], "destination": fields[1], "type": fields[2]}
        for fields in (line.split() for line in output(["cat", "/proc/self/mounts"]).splitlines())
        if len(fields) >= 3
    ]
    return ContainerView(namespace, pod, container, env, cdi_devices, mounts, run)


def container_claims(pod: Mapping[str, Any], container: str) -> list[tuple[str, str]]:
    """(claim name, request; "" for all of the claim) of each claim the pod's `container` uses, as the
    kubelet resolves them (fleet.podclaims: template claims, the extended-resource claim)."""
    spec = pod["spec"]
    (ctr,) = [c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == container]
    return container_claim_refs(pod, ctr)
