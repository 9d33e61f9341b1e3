"""One node of Preparer tests over real files: its directories, its API server's claims, the claims' parts.

`Node` (root = a test's tmp_path) holds the claims `get_claim` returns; `preparer()` is the Preparer behind
the runtime's claim checks (runtime.claims), as `serve` hands it to the gRPC edge, opened as at start;
`ref`, `result`, `claim_object`, `prepared` build claims, allocation results and expected results;
`opaque`, `timeslicing` and `with_configs` add opaque device configs to an allocation, as the scheduler
copies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.model import ClaimRef, GpuDevice, PreparedDevice
from fakeplugin.runtime.bootid import read_boot_id
from fakeplugin.runtime.claims import CheckedClaims
from tests.harness import DRIVER
from tests.harness.factories import T10, numbered

NODE = "node-a"
BOOT = "0b00b00b-0000-4000-8000-000000000001"


def gpu(minor: int) -> GpuDevice:
    return numbered(
        T10,
        minor,
        uuid=f"GPU-{minor:08x}-1111-2222-3333-444444444444",
        driver_version="580.95.05",
        pci_bus_id=f"0000:{minor + 3:02x}:00.0",
    )


def uid(n: int) -> str:
    return f"{n:08x}-aaaa-4bbb-8ccc-dddddddddddd"


def ref(n: int, ns: str = "ns") -> ClaimRef:
    return ClaimRef(namespace=ns, uid=uid(n), name=f"claim-{n}")


def result(
    device: str, request: str = "gpus", *, driver: str = DRIVER, pool: str = NODE, admin: bool | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": driver, "pool": pool, "device": device}
    if admin is not None:
        out["adminAccess"] = admin
    return out


def claim_object(claim: ClaimRef, *results: dict[str, Any], allocated: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"namespace": claim.namespace, "name": claim.name, "uid": claim.uid}}
    obj["status"] = {"allocation": {"devices": {"results": list(results)}}} if allocated else {}
    return obj


@dataclass
class Node:
    """One node's directories and its API server's claims, as the tests set them up."""

    root: Path
    claims: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    fetched: list[tuple[str, str]] = field(default_factory=list)

    @property
    def cdi_root(self) -> Path:
        return self.root / "run" / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.root / "lib" / "plugins" / DRIVER

    @property
    def boot_id_file(self) -> Path:
        return self.root / "boot_id"

    def add(self, claim: ClaimRef, *results: dict[str, Any], allocated: bool = True) -> ClaimRef:
        self.claims[(claim.namespace, claim.name)] = claim_object(claim, *results, allocated=allocated)
        return claim

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self.fetched.append((namespace, name))
        try:
            return self.claims[(namespace, name)]
        except KeyError:
            raise RuntimeError(f'resourceclaims.resource.k8s.io "{name}" not found') from None

    def preparer(self, **overrides: Any) -> CheckedClaims:
        kwargs: dict[str, Any] = {
            "driver_name": DRIVER,
            "node_name": NODE,
            "devices": {d.name: d for d in map(gpu, range(4))},
            "get_claim": self.get_claim,
            "cdi_root": self.cdi_root,
            "plugin_dir": self.plugin_dir,
            "boot_id": read_boot_id(self.boot_id_file),
            **overrides,
        }
        preparer = GpuPreparer(**kwargs)
        preparer.open()
        return CheckedClaims(preparer, self.get_claim)

    def spec_path(self, claim: ClaimRef) -> Path:
        return cdi.spec_path(self.cdi_root, claim.uid, driver_name=DRIVER)

    def checkpoint(self) -> cp.Checkpoint:
        return cp.load(self.plugin_dir / cp.FILE_NAME, boot_id=self.boot_id_file.read_text().strip())

    def files(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file()}


def prepared(claim: ClaimRef, *devices: tuple[str, tuple[str, ...]]) -> tuple[PreparedDevice, ...]:
    return tuple(
        PreparedDevice(
            pool_name=NODE,
            device_name=name,
            request_names=requests,
            cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={claim.uid}-{name}",),
        )
        for name, requests in devices
    )


def with_configs(node: Node, claim: ClaimRef, *configs: dict[str, Any]) -> ClaimRef:
    node.claims[(claim.namespace, claim.name)]["status"]["allocation"]["devices"]["config"] = list(configs)
    return claim


def opaque(parameters: dict[str, Any], *requests: str, source: str = "FromClaim") -> dict[str, Any]:
    return {
        "source": source,
        "requests": list(requests),
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", **parameters},
        },
    }


def timeslicing(interval: str) -> dict[str, Any]:
    return {
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }
