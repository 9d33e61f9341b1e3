"""NVIDIA's go-nvlib (the library NVIDIA's DRA driver and device plugin build their devices with) through the
mock NVML library: a Go program on it (tests/data/gonvlib, built once into the build cache) enumerates a
container's GPUs and derives the architecture, brand and CUDA compute capability strings, the PCI bus ID
and MIG state; each equals what our ResourceSlices publish for the device (the same derivation as NVIDIA's
driver, checked by NVIDIA's own library). Build tier: it builds Go (about 15 s cold, go-nvlib from the Go
module proxy; nothing once cached).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fakeplugin.cluster import binaries
from tests.harness import gonvlib
from tests.harness.nvml import A5000_NODE, STATIC_MIG, T10_NODE, attribute, describe, inventory, published
from tests.harness.paths import SEED_LAB
from tests.harness.tooling import unavailable

pytestmark = pytest.mark.build

# (inventory, node, the container's devices, the GPUs it lists by device name)
CASES = [
    (SEED_LAB.read_text(encoding="utf-8"), T10_NODE, ["gpu-0", "gpu-1"], ["gpu-0", "gpu-1"]),
    (SEED_LAB.read_text(encoding="utf-8"), A5000_NODE, ["gpu-0"], ["gpu-0"]),
    (STATIC_MIG, "mig-node", ["gpu-0-mig-3g20gb-9-0", "gpu-0-mig-1g5gb-19-5"], ["gpu-0"]),
]


@pytest.fixture(scope="module")
def consumer() -> Path:
    if shutil.which("go") is None:
        unavailable("go is not on PATH (the go-nvlib consumer is built with it)")
    return gonvlib.build(binaries.cache_root())


@pytest.mark.parametrize(("text", "node", "mine", "gpus"), CASES, ids=["t10", "rtx-a5000", "static-mig"])
def test_go_nvlib_derives_what_the_slices_publish(
    consumer: Path, nvml_library: Path, tmp_path: Path, text: str, node: str, mine: list[str], gpus: list[str]
) -> None:
    devices, entries = published(inventory(text), node)
    seen = gonvlib.run(consumer, nvml_library.parent, describe(tmp_path / "nvml", [devices[n] for n in mine]))
    assert len(seen) == len(gpus)
    for gpu, name in zip(seen, gpus, strict=True):
        migs = [n for n in mine if n.startswith(f"{name}-mig-")]
        if migs:  # a GPU in MIG mode publishes no device of its own: its MIG devices carry its attributes
            source = entries[migs[0]]
            assert gpu["uuid"] == attribute(source, "parentUUID")
        else:
            source = entries[name]
            assert gpu["uuid"] == attribute(source, "uuid")
        assert gpu["name"] == attribute(source, "productName")
        assert gpu["architecture"] == attribute(source, "architecture")
        assert gpu["brand"] == attribute(source, "brand")
        # the slice's version attribute is the same numbers as a semantic version ("7.5" → "7.5.0")
        assert f"{gpu['cudaComputeCapability']}.0" == attribute(source, "cudaComputeCapability")
        assert gpu["pciBusID"] == attribute(source, "resource.kubernetes.io/pciBusID")
        assert gpu["migEnabled"] == bool(migs)
        assert gpu["migUUIDs"] == [attribute(entries[n], "uuid") for n in migs]
