"""The real plugin core and gRPC server over real files, with claims from JSON files instead of an API server.

Test-only wiring, nothing else: the runtime's claim checks, the GpuPreparer, the Server, the checkpoint and
CDI code are the product's.
`fakeplugin serve` needs an API server for its claims and slices; this harness replaces only that edge.

As a process (what `test_crash.py` kills): `python -m tests.harness.plugin ROOT` serves until SIGTERM, with

    ROOT/registry/                      the kubelet registration socket
    ROOT/plugins/gpu.nvidia.com/        DRA socket, checkpoint, lock, nvidia-smi data
    ROOT/cdi/                           CDI specs
    ROOT/claims/<namespace>_<name>.json the ResourceClaims the "API server" returns
    ROOT/boot_id                        the node's boot ID
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.model import ClaimRef, GpuDevice
from fakeplugin.runtime.bootid import read_boot_id
from fakeplugin.runtime.claims import CheckedClaims
from fakeplugin.server import ServerSettings, run
from tests.harness import DRIVER
from tests.harness.factories import T10, numbered

NODE = "node-a"
BOOT_ID = "0b00b00b-0000-4000-8000-000000000002"
GPUS = 8


def gpu(minor: int) -> GpuDevice:
    return numbered(T10, minor, uuid=f"GPU-{minor:08x}-1111-2222-3333-444444444444")


def devices() -> dict[str, GpuDevice]:
    return {d.name: d for d in map(gpu, range(GPUS))}


def cdi_root(root: Path) -> Path:
    return root / "cdi"


def plugin_dir(root: Path) -> Path:
    return root / "plugins" / DRIVER


def claims_dir(root: Path) -> Path:
    return root / "claims"


def settings(root: Path) -> ServerSettings:
    return ServerSettings(driver_name=DRIVER, registrar_dir=root / "registry", plugins_dir=root / "plugins")


def claim_object(ref: ClaimRef, device_names: list[str]) -> dict[str, Any]:
    """A ResourceClaim allocated `device_names` of this node's pool."""
    results = [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in device_names]
    return {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def write_claim(root: Path, ref: ClaimRef, claim: Any) -> None:
    """Make `claim` (any JSON, even a malformed object) what the fake API server returns for `ref`."""
    path = claims_dir(root) / f"{ref.namespace}_{ref.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_text(json.dumps(claim))
    tmp.replace(path)


class JsonClaims:
    """get_claim over ROOT/claims: a missing file is the API server's not-found."""

    def __init__(self, root: Path) -> None:
        self._dir = claims_dir(root)

    def __call__(self, namespace: str, name: str) -> dict[str, Any]:
        path = self._dir / f"{namespace}_{name}.json"
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise RuntimeError(f'resourceclaims.resource.k8s.io "{name}" not found') from None


def core(root: Path, **overrides: Any) -> CheckedClaims:
    """What `serve` hands the gRPC edge: the runtime's claim checks over a GpuPreparer, open (as at start)."""
    boot_id = root / "boot_id"
    if not boot_id.exists():
        boot_id.write_text(BOOT_ID + "\n")
    claims = JsonClaims(root)
    kwargs: dict[str, Any] = {
        "driver_name": DRIVER,
        "node_name": NODE,
        "devices": devices(),
        "get_claim": claims,
        "cdi_root": cdi_root(root),
        "plugin_dir": plugin_dir(root),
        "boot_id": read_boot_id(boot_id),
        **overrides,
    }
    preparer = GpuPreparer(**kwargs)
    preparer.open()
    return CheckedClaims(preparer, claims)


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    run(core(root), settings(root))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
