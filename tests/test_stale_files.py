"""Stale temp files (atomicfile, prepare.stale): our names are recognisable, and a starting plugin removes
exactly the ones a killed writer of ours left, never anybody else's file, never through a link."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakeplugin.atomicfile import remove_stale_temp_files, temp_name, temp_target, write_atomic
from fakeplugin.drivers.gpu.prepare import smi
from tests.harness import DRIVER
from tests.harness.prepare import BOOT, Node, ref, result, uid

OTHER_DRIVER_SPEC = "k8s.other.example.com-claim_0000.yaml"


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def test_temp_names_are_ours_and_name_their_target() -> None:
    name = temp_name("checkpoint.json")
    assert name.startswith(".checkpoint.json.fakeplugin-") and name.endswith(".tmp")
    assert temp_target(name) == "checkpoint.json"
    assert temp_name("checkpoint.json") != name
    for foreign in (
        ".checkpoint.json.tmp",
        ".checkpoint.json.abcd1234.tmp",  # tempfile.mkstemp's shape: anybody's
        "checkpoint.json.fakeplugin-0123456789abcdef.tmp",  # not hidden
        ".checkpoint.json.fakeplugin-0123456789ABCDEF.tmp",
        ".checkpoint.json.fakeplugin-0123456789abcdef.tmp.bak",
        ".fakeplugin-0123456789abcdef.tmp",  # no target
    ):
        assert temp_target(foreign) is None, foreign


def test_write_atomic_leaves_no_temp_file_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "spec.yaml"
    write_atomic(target, b"one", mode=0o640)
    write_atomic(target, b"two", mode=0o640)
    assert target.read_bytes() == b"two"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_a_failed_write_removes_its_temp_file(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").mkdir()  # rename over a directory fails
    with pytest.raises(OSError):
        write_atomic(tmp_path / "spec.yaml", b"x", mode=0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_remove_stale_temp_files_removes_only_our_regular_files(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "precious"
    victim.write_text("keep")
    d = tmp_path / "d"
    d.mkdir()
    ours = [d / temp_name("a.yaml"), d / temp_name("checkpoint.json")]
    for p in ours:
        p.write_text("half")
    link = d / temp_name("link.yaml")
    link.symlink_to(victim)
    subdir = d / temp_name("dir.yaml")
    subdir.mkdir()
    foreign = [d / ".a.yaml.abcd1234.tmp", d / "a.yaml", d / ".a.yaml.fakeplugin-xyz.tmp"]
    for p in foreign:
        p.write_text("theirs")

    assert sorted(remove_stale_temp_files(d)) == sorted(ours)
    assert sorted(p.name for p in d.iterdir()) == sorted(p.name for p in [link, subdir, *foreign])
    assert victim.read_text() == "keep" and link.is_symlink()
    assert remove_stale_temp_files(tmp_path / "missing") == []


def test_a_starting_plugin_removes_its_stale_temp_files_and_nothing_else(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    assert node.preparer().prepare([claim])[claim.uid].error == ""
    spec = node.spec_path(claim)
    data_dir = smi.data_dir(node.plugin_dir)
    bin_dir = smi.script_path(node.plugin_dir).parent
    # An earlier fakeplugin's directory of a claim's data files (no claim, e.g. a kill before its spec).
    other_data_dir = data_dir / uid(9)
    other_data_dir.mkdir(parents=True)
    before = node.files()

    ours = [
        node.cdi_root / temp_name(spec.name),
        node.cdi_root / temp_name(f"k8s.{DRIVER}-claim_{uid(7)}.yaml"),
        node.plugin_dir / temp_name("checkpoint.json"),
        bin_dir / temp_name("nvidia-smi"),
        data_dir / temp_name(f"{claim.uid}-gpu-1.env"),
        other_data_dir / temp_name("gpu-3.env"),
    ]
    foreign = [
        node.cdi_root / temp_name(OTHER_DRIVER_SPEC),  # another fakeplugin driver's, in the shared CDI root
        node.cdi_root / temp_name("nvidia.yaml"),
        node.cdi_root / ".k8s.gpu.nvidia.com-claim_x.yaml.abcd1234.tmp",
        node.cdi_root / OTHER_DRIVER_SPEC,
        node.plugin_dir / "notes.txt",
        data_dir / ".gpu-1.env.swp",
    ]
    for p in ours + foreign:
        p.write_text("partial")
    outside = node.root / "outside"
    outside.write_text("keep")
    link = node.plugin_dir / temp_name("checkpoint.json")
    link.symlink_to(outside)

    node.preparer()

    left = node.files()
    assert not any(str(p.relative_to(node.root)) in left for p in ours)
    assert {str(p.relative_to(node.root)) for p in foreign} <= left
    assert before <= left
    assert link.is_symlink() and outside.read_text() == "keep"
    # The plugin still works on the files it kept.
    assert node.preparer().prepare([claim])[claim.uid].error == ""
    assert os.path.exists(spec)
