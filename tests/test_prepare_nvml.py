"""Prepare with the mock NVML library (GpuPreparer's `nvml_library`, `serve --nvml-library`): each prepared
device's NVML description beside its nvidia-smi data, written before the CDI spec that mounts it and removed
after it, under the checkpoint's rules (rollback of an attempt that died, files written again for a
completed claim that lost them, stale temp files at start); without the library nothing of NVML exists.
pynvml reads a container made from the real spec."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fakeplugin import cdi
from fakeplugin.atomicfile import temp_name
from fakeplugin.cli import main
from fakeplugin.commands.serve import nvml_library as nvml_library_flag
from fakeplugin.drivers.gpu.prepare import cdispec, nvmldata, smi
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.model import ClaimState, PrepareResult
from tests.harness import DRIVER
from tests.harness.nvidia_smi import container_view
from tests.harness.nvml import probe
from tests.harness.paths import SEED_LAB
from tests.harness.prepare import BOOT, Node, gpu, prepared, ref, result


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def descriptions(node: Node) -> dict[str, str]:
    """The claims' NVML description files on the node: file name → text (the devices' own and their live
    directories are in folders beside them)."""
    directory = nvmldata.data_dir(node.plugin_dir)
    found = sorted(directory.iterdir()) if directory.exists() else []
    return {p.name: p.read_text() for p in found if p.is_file()}


def test_prepare_writes_each_devices_description_and_the_spec_mounts_it(
    node: Node, nvml_library: Path
) -> None:
    claim = node.add(ref(1), result("gpu-1"), result("gpu-2"))
    results = node.preparer(nvml_library=nvml_library).prepare([claim])

    assert results[claim.uid].error == ""
    assert descriptions(node) == {
        f"{claim.uid}-gpu-1.nvml": nvmldata.render_device(gpu(1)),
        f"{claim.uid}-gpu-2.nvml": nvmldata.render_device(gpu(2)),
    }
    # The specs mount the plugin's copy under the plugin dir, which a node shares with the plugin's container.
    installed = nvmldata.installed_library(node.plugin_dir)
    assert installed.read_bytes() == nvml_library.read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o755
    spec = yaml.safe_load(node.spec_path(claim).read_text())
    assert spec == cdispec.claim_spec(
        claim.uid, [gpu(1), gpu(2)], driver_name=DRIVER, plugin_dir=node.plugin_dir, nvml_library=installed
    )
    assert cdi.validate_spec(spec) == []
    [device] = [d for d in spec["devices"] if d["name"] == f"{claim.uid}-gpu-2"]
    assert {m["containerPath"]: m["hostPath"] for m in device["containerEdits"]["mounts"]} == {
        "/run/fakeplugin/gpus/gpu-2.env": str(smi.claim_data_path(node.plugin_dir, claim.uid, "gpu-2")),
        "/run/fakeplugin/nvml/gpu-2.nvml": str(nvmldata.claim_data_path(node.plugin_dir, claim.uid, "gpu-2")),
        "/run/fakeplugin/nvml/gpu-2.live": str(nvmldata.live_dir(node.plugin_dir, "gpu-2")),
    }
    library_mounts = [m for m in spec["containerEdits"]["mounts"] if m["hostPath"] == str(installed)]
    assert [m["containerPath"] for m in library_mounts] == list(nvmldata.library_container_paths())


def test_a_container_of_the_prepared_claim_lists_its_gpu_with_pynvml(
    node: Node, nvml_library: Path, tmp_path: Path
) -> None:
    claim = node.add(ref(1), result("gpu-3", "a"), result("gpu-0", "b"))
    node.preparer(nvml_library=nvml_library).prepare([claim])

    root = container_view(tmp_path / "ctr", [(node.spec_path(claim), ["gpu-3"])])  # request a's container
    library = root / nvmldata.library_container_paths()[0].lstrip("/")
    seen, stderr = probe(library.parent, root / nvmldata.DESCRIPTION_CONTAINER_DIR.lstrip("/"))
    assert stderr == ""
    assert seen["count"] == 1
    assert [(g["name"], g["uuid"], g["minor"]) for g in seen["gpus"]] == [
        (gpu(3).product_name, gpu(3).uuid, 3)
    ]


def test_without_the_library_nothing_of_nvml_is_written(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    preparer = node.preparer()
    preparer.prepare([claim])

    assert not nvmldata.data_dir(node.plugin_dir).exists()
    assert node.spec_path(claim).read_text() == cdi.spec_text(
        cdispec.claim_spec(claim.uid, [gpu(1)], driver_name=DRIVER, plugin_dir=node.plugin_dir)
    )
    assert "nvml" not in node.spec_path(claim).read_text()
    assert preparer.unprepare([claim]) == {claim.uid: ""}
    assert not nvmldata.data_dir(node.plugin_dir).exists()


def test_unprepare_removes_the_descriptions_after_the_spec(node: Node, nvml_library: Path) -> None:
    kept, removed = node.add(ref(1), result("gpu-0")), node.add(ref(2), result("gpu-1"), result("gpu-2"))
    preparer = node.preparer(nvml_library=nvml_library)
    preparer.prepare([kept, removed])

    assert preparer.unprepare([removed]) == {removed.uid: ""}
    assert preparer.unprepare([removed]) == {removed.uid: ""}  # again: nothing there is fine
    assert not node.spec_path(removed).exists()
    assert descriptions(node) == {f"{kept.uid}-gpu-0.nvml": nvmldata.render_device(gpu(0))}


def test_a_claim_left_prepare_started_loses_its_descriptions_and_gets_new_ones(
    node: Node, nvml_library: Path
) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    node.preparer(nvml_library=nvml_library)  # creates the directories
    # A plugin died between PrepareStarted and PrepareCompleted: the description of another device written.
    stale = prepared(claim, ("gpu-0", ("gpus",)))
    started = cp.Checkpoint(BOOT).with_claim(
        claim.uid, cp.ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "claim-1", stale)
    )
    cp.save(node.plugin_dir / cp.FILE_NAME, started)
    nvmldata.write_claim_data(node.plugin_dir, claim.uid, [gpu(0)])

    results = node.preparer(nvml_library=nvml_library).prepare([claim])

    assert results == {claim.uid: PrepareResult(devices=prepared(claim, ("gpu-1", ("gpus",))))}
    assert descriptions(node) == {f"{claim.uid}-gpu-1.nvml": nvmldata.render_device(gpu(1))}


def test_re_prepare_writes_a_vanished_description_again(node: Node, nvml_library: Path) -> None:
    claim = node.add(ref(1), result("gpu-2"))
    preparer = node.preparer(nvml_library=nvml_library)
    first = preparer.prepare([claim])
    before = descriptions(node)
    nvmldata.claim_data_path(node.plugin_dir, claim.uid, "gpu-2").unlink()

    assert preparer.prepare([claim]) == first
    assert descriptions(node) == before


def test_a_plugin_started_with_the_library_gives_earlier_claims_nvml_at_their_next_prepare(
    node: Node, nvml_library: Path
) -> None:
    claim = node.add(ref(1), result("gpu-2"))
    first = node.preparer().prepare([claim])

    assert node.preparer(nvml_library=nvml_library).prepare([claim]) == first
    assert list(descriptions(node)) == [f"{claim.uid}-gpu-2.nvml"]
    assert str(nvmldata.installed_library(node.plugin_dir)) in node.spec_path(claim).read_text()


def test_a_plugin_started_with_the_library_removes_descriptions_of_claims_it_does_not_hold(
    node: Node, nvml_library: Path
) -> None:
    kept, gone = node.add(ref(1), result("gpu-0")), node.add(ref(2), result("gpu-1"))
    node.preparer(nvml_library=nvml_library).prepare([kept, gone])
    # A plugin restarted without the library unprepares a claim: its description stays behind.
    assert node.preparer().unprepare([gone]) == {gone.uid: ""}
    assert list(descriptions(node)) == [f"{kept.uid}-gpu-0.nvml", f"{gone.uid}-gpu-1.nvml"]
    directory = nvmldata.data_dir(node.plugin_dir)
    (directory / "notes.nvml").write_text("not a claim's")

    node.preparer(nvml_library=nvml_library)
    assert list(descriptions(node)) == [f"{kept.uid}-gpu-0.nvml", "notes.nvml"]

    node.boot_id_file.write_text("0b00b00b-0000-4000-8000-000000000002\n")  # a reboot: no claim is prepared
    node.preparer(nvml_library=nvml_library)
    assert list(descriptions(node)) == ["notes.nvml"]


def test_a_starting_plugin_removes_stale_description_temp_files(node: Node, nvml_library: Path) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    node.preparer(nvml_library=nvml_library).prepare([claim])
    directory = nvmldata.data_dir(node.plugin_dir)
    half = directory / temp_name(f"{claim.uid}-gpu-1.nvml")
    half.write_text("format=1\n[gpu")  # a writer killed before its rename
    halves = [  # the device's own description's, and its live state's (telemetry.nvmllive)
        nvmldata.device_data_path(node.plugin_dir, "gpu-1").with_name(temp_name("gpu-1.nvml")),
        nvmldata.live_dir(node.plugin_dir, "gpu-1") / temp_name(nvmldata.LIVE_STATE),
    ]
    for path in halves:
        path.write_text("format=1\n")
    library = nvmldata.installed_library(node.plugin_dir)
    half_library = library.with_name(temp_name(library.name))  # one killed while installing the library
    half_library.write_bytes(b"\x7fELF")
    foreign = directory / "notes.txt"
    foreign.write_text("keep")

    node.preparer()  # without the library its directories are not the plugin's
    assert half.exists() and half_library.exists()
    node.preparer(nvml_library=nvml_library)
    assert not half.exists() and not half_library.exists() and foreign.read_text() == "keep"
    assert not any(path.exists() for path in halves)
    assert library.read_bytes() == nvml_library.read_bytes()
    assert f"{claim.uid}-gpu-1.nvml" in descriptions(node)


def test_a_description_that_cannot_be_written_fails_the_claim_naming_the_directory(
    node: Node, nvml_library: Path
) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    preparer = node.preparer(nvml_library=nvml_library)
    nvmldata.data_dir(node.plugin_dir).parent.mkdir(parents=True, exist_ok=True)
    nvmldata.data_dir(node.plugin_dir).write_text("not a directory")

    error = preparer.prepare([claim])[claim.uid].error
    assert f"write NVML description {nvmldata.data_dir(node.plugin_dir)}" in error
    assert not node.spec_path(claim).exists()  # no spec mounts what is not there
    assert node.checkpoint().claims[claim.uid].state is ClaimState.PREPARE_STARTED


# ---- serve --nvml-library ---------------------------------------------------------------------------------


def test_the_flag_takes_a_built_library_as_an_absolute_path(
    nvml_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert nvml_library_flag("", "gpus") is None
    monkeypatch.chdir(nvml_library.parent)
    assert nvml_library_flag(nvml_library.name, "gpus") == nvml_library


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: d / "missing.so", "no such file"),
        (lambda d: d, "cannot read it"),
        (lambda d: d / "lib.so" if (d / "lib.so").write_text("not ELF") else d, "not a shared library"),
    ],
)
def test_a_bad_library_path_names_the_flag_and_the_path(
    tmp_path: Path, make: Callable[[Path], Path], problem: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(ValueError, match=f"^--nvml-library {re.escape(str(path))}: {problem}"):
        nvml_library_flag(str(path), "gpus")


def test_the_compute_domain_plugin_refuses_the_library(nvml_library: Path) -> None:
    with pytest.raises(ValueError, match=r"^--nvml-library \S+: only with --plugin gpus"):
        nvml_library_flag(str(nvml_library), "compute-domains")


def test_serve_with_a_missing_library_stops_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "libnvidia-ml.so.1"
    argv = ["serve", f"--inventory={SEED_LAB}", "--node-name=n1", f"--nvml-library={missing}"]
    assert main(argv) != 0
    assert capsys.readouterr().err.strip().endswith(f"error: --nvml-library {missing}: no such file")


def test_fleet_with_a_missing_library_stops_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "libnvidia-ml.so.1"
    assert main(["fleet", f"--inventory={SEED_LAB}", f"--nvml-library={missing}"]) != 0
    assert capsys.readouterr().err.strip().endswith(f"error: --nvml-library {missing}: no such file")
