"""Golden files for everything `fakeplugin render` prints (tests/golden/).

A golden file is the exact expected output; a change in rendering shows up as a reviewable diff.
Files at the top are the reference lab's driver release's (25.12, examples/seed-lab.yaml pins it);
tests/golden/releases/<release>/ hold the other releases' renders of the seed lab, the MIG example and a
few profiles, 0.5.0's being what an inventory without `driverRelease` renders (the default).
After an intended change, regenerate them and review `git diff tests/golden`:

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_golden.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import featuregates, releases
from fakeplugin.drivers.gpu.publish.deviceclasses import device_classes
from fakeplugin.inventory import load_inventory, parse_inventory
from fakeplugin.profiles import load_profile, profile_names
from fakeplugin.render import render_documents, to_yaml
from tests.harness.golden import GOLDEN, check_golden

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "examples" / "seed-lab.yaml"
MIG = ROOT / "examples" / "mig.yaml"
NUMA = ROOT / "examples" / "numa.yaml"
RELEASE_PROFILES = ("h200", "rtx-a5000", "t10")
LAB_RELEASE = "25.12"  # the top-level goldens' release
OTHER_RELEASES = [name for name in releases.RELEASES if name != LAB_RELEASE]


def test_render_seed_lab() -> None:
    assert load_inventory(SEED).driver_release == LAB_RELEASE
    docs = render_documents(load_inventory(SEED))
    assert [d["kind"] for d in docs] == ["DeviceClass"] * 3 + ["ResourceSlice"] * 2
    check_golden("render-seed-lab.yaml", docs)


def test_deviceclasses() -> None:
    check_golden("deviceclasses.yaml", device_classes())


def one_gpu(profile: str, release: str = LAB_RELEASE) -> list[dict[str, Any]]:
    inv = parse_inventory(
        {
            "driverVersion": "580.126.20",
            "cudaDriverVersion": "13.0",
            "driverRelease": release,
            "nodes": [{"name": f"node-{profile}", "gpus": [{"profile": profile}]}],
        },
        source="test",
    )
    slices = render_documents(inv)[3:]
    assert [s["kind"] for s in slices] == ["ResourceSlice"]
    return slices


LAB_NAMES = releases.get(LAB_RELEASE).architectures
# Profiles the lab's release's plugin cannot enumerate (fakeplugin.releases `architectures`): rendered
# by the newest release that can, their failure in tests/test_releases.py.
NEWER_PROFILES = [p for p in profile_names() if load_profile(p).architecture not in LAB_NAMES]


@pytest.mark.parametrize("profile", [p for p in profile_names() if p not in NEWER_PROFILES])
def test_one_gpu_of_each_profile(profile: str) -> None:
    check_golden(f"profile-{profile}.yaml", one_gpu(profile))


@pytest.mark.parametrize("profile", NEWER_PROFILES)
def test_one_gpu_of_each_profile_the_labs_release_cannot_enumerate(profile: str) -> None:
    check_golden(f"releases/0.5.0-dev/profile-{profile}.yaml", one_gpu(profile, "0.5.0-dev"))


def test_the_seed_lab_without_its_driver_release_renders_as_the_newest_release() -> None:
    data = yaml.safe_load(SEED.read_text())
    del data["driverRelease"]
    docs = render_documents(parse_inventory(data, source="seed-lab without driverRelease"))
    assert releases.DEFAULT_RELEASE == releases.NEWEST_RELEASE == "0.5.0"
    assert to_yaml(docs) == (GOLDEN / "releases" / "0.5.0" / "render-seed-lab.yaml").read_text()


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_render_seed_lab_per_release(release: str) -> None:
    docs = render_documents(load_inventory(SEED), release=releases.get(release))
    check_golden(f"releases/{release}/render-seed-lab.yaml", docs)


@pytest.mark.parametrize("release", OTHER_RELEASES)
def test_render_mig_example_with_dynamic_mig_per_release(release: str) -> None:
    docs = render_documents(load_inventory(MIG), dynamic_mig=True, release=releases.get(release))
    check_golden(f"releases/{release}/mig-dynamic.yaml", docs)


@pytest.mark.parametrize("release", OTHER_RELEASES)
@pytest.mark.parametrize("profile", RELEASE_PROFILES)
def test_one_gpu_of_a_few_profiles_per_release(release: str, profile: str) -> None:
    check_golden(f"releases/{release}/profile-{profile}.yaml", one_gpu(profile, release))


# Consumable shares exist in 0.5.0-dev and 0.5.0 (fakeplugin.consumableshares; 0.5.0 renders as 0.5.0-dev,
# so these goldens are 0.5.0-dev's only): the seed lab shared by memory,
# the MIG example (static MIG devices too) by a number of shares.
SHARES_GOLDENS = {
    "render-seed-lab-consumable-shares-memory.yaml": (SEED, "memory"),
    "mig-consumable-shares-4.yaml": (MIG, "4"),
}


@pytest.mark.parametrize("name", SHARES_GOLDENS)
def test_render_with_consumable_shares(name: str) -> None:
    inventory, mode = SHARES_GOLDENS[name]
    docs = render_documents(
        load_inventory(inventory), release=releases.get("0.5.0-dev"), consumable_shares=mode
    )
    devices = [d for doc in docs if doc["kind"] == "ResourceSlice" for d in doc["spec"]["devices"]]
    assert devices and all(d["allowMultipleAllocations"] is True for d in devices)
    check_golden(f"releases/0.5.0-dev/{name}", docs)


@pytest.mark.parametrize(
    ("gates", "name"), [("", "numa.yaml"), ("DRAListTypeAttributes=true", "numa-list.yaml")]
)
def test_render_numa_example_on_0_5_0_dev(gates: str, name: str) -> None:
    """resource.kubernetes.io/numaNode: an int, or a one-element `ints` list with DRAListTypeAttributes."""
    dev = releases.get("0.5.0-dev")
    docs = render_documents(load_inventory(NUMA), release=dev.with_gates(featuregates.parse(gates, dev)))
    check_golden(f"releases/0.5.0-dev/{name}", docs)


def test_no_stale_profile_goldens_and_all_parse() -> None:
    top = [p for p in profile_names() if p not in NEWER_PROFILES]
    assert {p.name for p in GOLDEN.glob("profile-*.yaml")} == {f"profile-{p}.yaml" for p in top}
    for name in (
        "render-seed-lab.yaml",
        "deviceclasses.yaml",
        *(f"profile-{p}.yaml" for p in top),
        *(f"releases/0.5.0-dev/profile-{p}.yaml" for p in NEWER_PROFILES),
        *(f"releases/{r}/{f}" for r in OTHER_RELEASES for f in ("render-seed-lab.yaml", "mig-dynamic.yaml")),
        *(f"releases/{r}/profile-{p}.yaml" for r in OTHER_RELEASES for p in RELEASE_PROFILES),
        *(f"releases/0.5.0-dev/{name}" for name in SHARES_GOLDENS),
        "releases/0.5.0-dev/numa.yaml",
        "releases/0.5.0-dev/numa-list.yaml",
    ):
        assert all(isinstance(doc, dict) for doc in yaml.safe_load_all((GOLDEN / name).read_text()))
