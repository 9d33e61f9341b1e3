"""Prepare/Unprepare over real files (prepare.preparer): state machine, errors, hostile input, locking."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.model import ClaimRef, ClaimState, PrepareResult
from tests.harness import DRIVER
from tests.harness.prepare import BOOT, NODE, Node, claim_object, gpu, prepared, ref, result, uid


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


# ---- prepare ---------------------------------------------------------------------------------------------


def test_prepare_writes_cdi_spec_and_checkpoint(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1"), result("gpu-2"))
    results = node.preparer().prepare([claim])

    expected = prepared(claim, ("gpu-1", ("gpus",)), ("gpu-2", ("gpus",)))
    assert results == {claim.uid: PrepareResult(devices=expected)}
    spec = yaml.safe_load(node.spec_path(claim).read_text())
    assert spec == cdispec.claim_spec(
        claim.uid, [gpu(1), gpu(2)], driver_name=DRIVER, plugin_dir=node.plugin_dir
    )
    assert cdi.validate_spec(spec) == []
    assert [d["name"] for d in spec["devices"]] == [f"{claim.uid}-gpu-1", f"{claim.uid}-gpu-2"]
    assert node.checkpoint().claims == {
        claim.uid: cp.ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "claim-1", expected)
    }


def test_prepare_uses_base_request_names_and_merges_requests_per_device(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0", "gpus/big"), result("gpu-1", "other"), result("gpu-0", "more/x"))
    results = node.preparer().prepare([claim])
    assert results[claim.uid] == PrepareResult(
        devices=prepared(claim, ("gpu-0", ("gpus", "more")), ("gpu-1", ("other",)))
    )


def test_prepare_with_device_nodes_puts_them_in_the_spec(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-3"))
    node.preparer(device_nodes=True).prepare([claim])
    spec = yaml.safe_load(node.spec_path(claim).read_text())
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "type": "c", "major": 195, "minor": 3}
    ]


def test_re_prepare_is_idempotent_and_leaves_the_spec_alone(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    first = node.preparer().prepare([claim])
    inode = node.spec_path(claim).stat().st_ino

    assert node.preparer().prepare([claim]) == first  # a restarted plugin
    assert node.spec_path(claim).stat().st_ino == inode  # not rewritten (as the real driver)
    assert node.checkpoint().claims[claim.uid].state is ClaimState.PREPARE_COMPLETED


def test_re_prepare_rewrites_a_vanished_cdi_spec(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"), result("gpu-2"))
    preparer = node.preparer()
    first = preparer.prepare([claim])
    content = node.spec_path(claim).read_text()
    node.spec_path(claim).unlink()  # a reboot emptied the tmpfs CDI root, the checkpoint survived

    assert preparer.prepare([claim]) == first
    assert node.spec_path(claim).read_text() == content


def test_a_claim_left_prepare_started_is_rolled_back_and_prepared_again(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-1"))
    node.preparer()  # creates the directories
    # A plugin died between PrepareStarted and PrepareCompleted, with a half-written spec and another device.
    stale = prepared(claim, ("gpu-0", ("gpus",)))
    started = cp.Checkpoint(BOOT).with_claim(
        claim.uid, cp.ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "claim-1", stale)
    )
    cp.save(node.plugin_dir / cp.FILE_NAME, started)
    node.spec_path(claim).write_text("half-written")

    results = node.preparer().prepare([claim])

    expected = prepared(claim, ("gpu-1", ("gpus",)))
    assert results == {claim.uid: PrepareResult(devices=expected)}
    assert node.checkpoint().claims == {
        claim.uid: cp.ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "claim-1", expected)
    }
    assert yaml.safe_load(node.spec_path(claim).read_text()) == cdispec.claim_spec(
        claim.uid, [gpu(1)], driver_name=DRIVER, plugin_dir=node.plugin_dir
    )
    # gpu-0 is free again
    other = node.add(ref(2), result("gpu-0"))
    assert node.preparer().prepare([other])[other.uid].error == ""


def test_a_device_of_another_claim_is_refused(node: Node) -> None:
    first = node.add(ref(1), result("gpu-0"))
    second = node.add(ref(2), result("gpu-1"), result("gpu-0"))
    preparer = node.preparer()
    preparer.prepare([first])

    results = preparer.prepare([second])

    assert results == {
        second.uid: PrepareResult(
            error=f"error preparing devices for claim ns/claim-2:{second.uid}: "
            f"unable to prepare claim {second.uid}: "
            f"requested device gpu-0 is already allocated to different claim {first.uid}"
        )
    }
    assert not node.spec_path(second).exists()
    assert set(node.checkpoint().claims) == {first.uid}


def test_an_admin_access_claim_shares_a_prepared_device_and_gets_its_own_spec(node: Node) -> None:
    user = node.add(ref(1), result("gpu-0"))
    admin = node.add(ref(2), result("gpu-0", "monitor", admin=True))
    preparer = node.preparer()
    preparer.prepare([user])

    results = preparer.prepare([admin])

    assert results == {admin.uid: PrepareResult(devices=prepared(admin, ("gpu-0", ("monitor",))))}
    spec = yaml.safe_load(node.spec_path(admin).read_text())
    assert spec == cdispec.claim_spec(admin.uid, [gpu(0)], driver_name=DRIVER, plugin_dir=node.plugin_dir)
    assert node.checkpoint().claims[admin.uid].admin_devices == {"gpu-0"}
    assert node.checkpoint().claims[user.uid].admin_devices == frozenset()
    raw = json.loads((node.plugin_dir / cp.FILE_NAME).read_text())["preparedClaims"]
    assert raw[admin.uid]["adminAccessDevices"] == ["gpu-0"]
    assert "adminAccessDevices" not in raw[user.uid]


def test_a_device_held_with_admin_access_does_not_block_an_ordinary_claim(node: Node) -> None:
    admin = node.add(ref(1), result("gpu-0", admin=True))
    user = node.add(ref(2), result("gpu-0"))
    other = node.add(ref(3), result("gpu-0", admin=False))  # adminAccess: false is an ordinary result
    preparer = node.preparer()
    preparer.prepare([admin])

    assert preparer.prepare([user])[user.uid].error == ""
    assert preparer.prepare([other])[other.uid].error.endswith(
        f"requested device gpu-0 is already allocated to different claim {user.uid}"
    )


def test_admin_access_is_per_device_and_needs_every_result_for_it(node: Node) -> None:
    user = node.add(ref(1), result("gpu-0"), result("gpu-1"))
    # gpu-0 only with admin access; gpu-1 once with and once without: an ordinary device for the check.
    mixed = node.add(
        ref(2), result("gpu-0", "a", admin=True), result("gpu-1", "a", admin=True), result("gpu-1", "b")
    )
    preparer = node.preparer()
    preparer.prepare([user])

    error = preparer.prepare([mixed])[mixed.uid].error

    assert error.endswith(f"requested device gpu-1 is already allocated to different claim {user.uid}")


def test_an_admin_access_flag_that_is_not_a_boolean_fails_the_claim(node: Node) -> None:
    claim = node.add(ref(1), {**result("gpu-0"), "adminAccess": "yes"})

    error = node.preparer().prepare([claim])[claim.uid].error

    assert error == (
        "claim ns/claim-1: status.allocation.devices.results[0].adminAccess: expected a boolean, got 'yes'"
    )


def test_only_completed_claims_and_earlier_claims_of_the_batch_hold_their_devices(node: Node) -> None:
    node.preparer()  # creates the directories
    died = node.add(ref(1), result("gpu-0"))
    started = cp.Checkpoint(BOOT).with_claim(
        died.uid,
        cp.ClaimEntry(ClaimState.PREPARE_STARTED, "ns", "claim-1", prepared(died, ("gpu-0", ("gpus",)))),
    )
    cp.save(node.plugin_dir / cp.FILE_NAME, started)
    first, second = node.add(ref(2), result("gpu-0")), node.add(ref(3), result("gpu-0"))

    # One batch: an attempt that died midway holds nothing (as upstream), the batch's first claim does.
    results = node.preparer().prepare([first, second])

    assert results[first.uid].error == ""
    assert results[second.uid].error.endswith(
        f"requested device gpu-0 is already allocated to different claim {first.uid}"
    )


def test_a_checkpoint_without_admin_access_devices_reads_as_ordinary_claims(node: Node) -> None:
    node.preparer()  # creates the directories
    old = node.add(ref(1), result("gpu-0", admin=True))
    entry = cp.ClaimEntry(ClaimState.PREPARE_COMPLETED, "ns", "claim-1", prepared(old, ("gpu-0", ("gpus",))))
    cp.save(node.plugin_dir / cp.FILE_NAME, cp.Checkpoint(BOOT).with_claim(old.uid, entry))
    assert "adminAccessDevices" not in (node.plugin_dir / cp.FILE_NAME).read_text()
    user = node.add(ref(2), result("gpu-0"))

    error = node.preparer().prepare([user])[user.uid].error

    assert error.endswith(f"requested device gpu-0 is already allocated to different claim {old.uid}")


def test_a_reboot_forgets_prepared_claims(node: Node) -> None:
    first = node.add(ref(1), result("gpu-0"))
    node.preparer().prepare([first])
    node.boot_id_file.write_text("0b00b00b-0000-4000-8000-000000000002\n")

    preparer = node.preparer()

    on_disk = cp.decode((node.plugin_dir / cp.FILE_NAME).read_bytes(), source=Path("x"))
    # Written by the default release, 0.5.0.
    assert on_disk == cp.Checkpoint("0b00b00b-0000-4000-8000-000000000002", driver_release="0.5.0")
    second = node.add(ref(2), result("gpu-0"))
    assert preparer.prepare([second])[second.uid].error == ""


def test_a_corrupt_checkpoint_stops_start_and_fails_claims_naming_the_file(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    preparer = node.preparer()
    checkpoint_file = node.plugin_dir / cp.FILE_NAME
    checkpoint_file.write_text("{not json")

    with pytest.raises(
        cp.CheckpointError, match=f"checkpoint {checkpoint_file} is corrupted: not valid JSON"
    ):
        node.preparer()
    prepare_error = preparer.prepare([claim])[claim.uid].error
    unprepare_error = preparer.unprepare([claim])[claim.uid]

    assert prepare_error.startswith(
        f"error preparing devices for claim ns/claim-1:{claim.uid}: unable to get checkpoint: "
        f"checkpoint {checkpoint_file} is corrupted: not valid JSON"
    )
    assert unprepare_error.startswith(
        f"error unpreparing devices for claim ns/claim-1:{claim.uid}: unable to get checkpoint: "
        f"checkpoint {checkpoint_file} is corrupted"
    )
    assert checkpoint_file.read_text() == "{not json"
    assert not node.spec_path(claim).exists()


def test_each_claim_gets_its_own_result(node: Node) -> None:
    good = node.add(ref(1), result("gpu-0"))
    unallocated = node.add(ref(2), allocated=False)
    replaced = node.add(ref(3), result("gpu-1"))
    node.claims[("ns", "claim-3")]["metadata"]["uid"] = uid(33)
    missing = ref(4)
    unknown_device = node.add(ref(5), result("gpu-1"), result("gpu-9"))
    elsewhere = node.add(ref(6), result("gpu-2", driver="other.example.com"), result("gpu-3", pool="node-b"))
    malformed = node.add(ref(7), {"driver": DRIVER, "pool": NODE, "request": "gpus"})

    results = node.preparer().prepare(
        [good, unallocated, replaced, missing, unknown_device, elsewhere, malformed]
    )

    assert results == {
        good.uid: PrepareResult(devices=prepared(good, ("gpu-0", ("gpus",)))),
        unallocated.uid: PrepareResult(error="claim ns/claim-2 not allocated"),
        replaced.uid: PrepareResult(error="claim ns/claim-3 got replaced"),
        missing.uid: PrepareResult(
            error='retrieve claim ns/claim-4: resourceclaims.resource.k8s.io "claim-4" not found'
        ),
        unknown_device.uid: PrepareResult(
            error=f"error preparing devices for claim ns/claim-5:{unknown_device.uid}: "
            f"prepare devices failed: allocated device gpu-9 does not exist in pool {NODE} "
            "(has: gpu-0, gpu-1, gpu-2, gpu-3)"
        ),
        elsewhere.uid: PrepareResult(),  # nothing of ours on this node
        malformed.uid: PrepareResult(
            error="claim ns/claim-7: status.allocation.devices.results[0].device: expected a non-empty string"
        ),
    }
    assert {p.name for p in node.cdi_root.iterdir()} == {node.spec_path(good).name}
    assert set(node.checkpoint().claims) == {good.uid}


@pytest.mark.parametrize(
    ("namespace", "name", "claim_uid", "field"),
    [
        ("ns", "claim", "../../../../escaped", "uid"),
        ("ns", "claim", "a/b", "uid"),
        ("ns", "claim", "..", "uid"),
        ("ns", "claim", "", "uid"),
        ("ns", "claim", "ABCDEF00-0000-4000-8000-000000000000", "uid"),
        ("ns", "claim", "a" * 64, "uid"),
        ("../ns", "claim", uid(1), "namespace"),
        ("ns", "../../claim", uid(1), "name"),
        ("ns", "claim\nx", uid(1), "name"),
    ],
)
def test_hostile_claim_references_never_reach_the_api_or_the_disk(
    node: Node, namespace: str, name: str, claim_uid: str, field: str
) -> None:
    preparer = node.preparer()
    before = node.files()
    hostile = ClaimRef(namespace=namespace, uid=claim_uid, name=name)
    node.claims[(namespace, name)] = claim_object(hostile, result("gpu-0"))

    error = preparer.prepare([hostile])[claim_uid].error
    unprepare_error = preparer.unprepare([hostile])[claim_uid]

    assert error.startswith(f"invalid claim reference {str(hostile)!r}: {field} ")
    assert unprepare_error == ""  # it cannot have been prepared: nothing to undo
    assert node.fetched == []
    assert node.files() == before
    assert list(node.cdi_root.iterdir()) == []


# ---- unprepare -------------------------------------------------------------------------------------------


def test_unprepare_of_an_unknown_claim_succeeds(node: Node) -> None:
    assert node.preparer().unprepare([ref(1)]) == {uid(1): ""}
    assert node.fetched == [("ns", "claim-1")]  # its fault annotations only; not found: no fault


def test_unprepare_removes_spec_and_entry(node: Node) -> None:
    kept, removed = node.add(ref(1), result("gpu-0")), node.add(ref(2), result("gpu-1"))
    preparer = node.preparer()
    preparer.prepare([kept, removed])
    node.fetched.clear()

    assert preparer.unprepare([removed]) == {removed.uid: ""}
    assert preparer.unprepare([removed]) == {removed.uid: ""}  # again: already gone

    assert not node.spec_path(removed).exists()
    assert node.spec_path(kept).exists()
    assert set(node.checkpoint().claims) == {kept.uid}
    # No GET for the first (no unprepare-error at its Prepare); the second, a claim this process no
    # longer knows, reads its fault annotations.
    assert node.fetched == [("ns", removed.name)]


def test_unprepare_of_a_prepare_started_claim_cleans_up(node: Node) -> None:
    claim = ref(1)
    node.preparer()
    started = cp.ClaimEntry(
        ClaimState.PREPARE_STARTED, "ns", "claim-1", prepared(claim, ("gpu-0", ("gpus",)))
    )
    cp.save(node.plugin_dir / cp.FILE_NAME, cp.Checkpoint(BOOT).with_claim(claim.uid, started))
    node.spec_path(claim).write_text("half-written")

    assert node.preparer().unprepare([claim]) == {claim.uid: ""}
    assert not node.spec_path(claim).exists()
    assert node.checkpoint().claims == {}


def test_unprepare_with_the_spec_already_gone_succeeds(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    preparer = node.preparer()
    preparer.prepare([claim])
    node.spec_path(claim).unlink()
    assert preparer.unprepare([claim]) == {claim.uid: ""}
    assert node.checkpoint().claims == {}


# ---- locking ---------------------------------------------------------------------------------------------


def hold_lock(lock_file: Path) -> subprocess.Popen[str]:
    """Another process holding the node lock until its stdin closes."""
    script = (
        "import fcntl, sys\n"
        f"f = open({str(lock_file)!r}, 'a')\n"
        "fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_a_lock_held_by_another_process_fails_the_claim_then_clears(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    preparer = node.preparer(lock_timeout=0.2)
    holder = hold_lock(node.plugin_dir / "pu.lock")
    try:
        error = preparer.prepare([claim])[claim.uid].error
        unprepare_error = preparer.unprepare([claim])[claim.uid]
    finally:
        holder.communicate("")  # closes stdin: the holder exits and its lock goes with it

    assert error == (
        "error acquiring prep/unprep lock: timed out after 0.2s waiting for flock on "
        f"{node.plugin_dir / 'pu.lock'}"
    )
    assert unprepare_error.startswith("error acquiring prep/unprep lock: ")
    assert not node.spec_path(claim).exists()
    assert preparer.prepare([claim])[claim.uid].error == ""


def test_two_plugins_preparing_at_once_keep_a_consistent_checkpoint(node: Node) -> None:
    devices = {d.name: d for d in map(gpu, range(16))}
    claims = [node.add(ref(n), result(f"gpu-{n}")) for n in range(16)]
    plugins = [
        node.preparer(devices=devices),
        node.preparer(devices=devices),
    ]  # e.g. old and new during an update
    start = threading.Barrier(4)
    results: dict[str, PrepareResult] = {}

    def work(preparer: GpuPreparer, mine: list[ClaimRef]) -> Callable[[], None]:
        def run() -> None:
            start.wait()
            for claim in mine:  # one call per claim: every claim is its own read-modify-write
                results.update(preparer.prepare([claim]))

        return run

    threads = [threading.Thread(target=work(plugins[i % 2], claims[i::4])) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert all(r.error == "" for r in results.values()), results
    state = node.checkpoint()
    assert set(state.claims) == {c.uid for c in claims}
    assert all(e.state is ClaimState.PREPARE_COMPLETED for e in state.claims.values())
    assert {p.name for p in node.cdi_root.iterdir()} == {node.spec_path(c).name for c in claims}


def wait_until_fetched(node: Node, count: int) -> None:
    """Until `count` claims were read from the API: their callers then queue for the lock at once."""
    for _ in range(1000):
        if len(node.fetched) >= count:
            threading.Event().wait(0.3)
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"only {len(node.fetched)} of {count} claims were read")


def test_claims_queued_behind_the_lock_share_two_checkpoint_writes(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    devices = {d.name: d for d in map(gpu, range(8))}
    claims = [node.add(ref(n), result(f"gpu-{n}")) for n in range(8)]
    preparer = node.preparer(devices=devices)
    writes: list[int] = []
    real_save = cp.save
    monkeypatch.setattr(
        cp, "save", lambda path, c, **kw: (writes.append(len(c.claims)), real_save(path, c, **kw))
    )
    holder = hold_lock(node.plugin_dir / "pu.lock")
    results: dict[str, PrepareResult] = {}
    threads = [threading.Thread(target=lambda c=c: results.update(preparer.prepare([c]))) for c in claims]
    try:
        for t in threads:
            t.start()
        wait_until_fetched(node, 8)
    finally:
        holder.communicate("")
    for t in threads:
        t.join(10)

    assert {uid: r.error for uid, r in results.items()} == {c.uid: "" for c in claims}
    # PrepareStarted and PrepareCompleted of the batch the first caller leads, then of the rest (one claim
    # at a time: sixteen writes).
    assert len(writes) <= 4 and writes[-1] == 8
    assert set(node.checkpoint().claims) == {c.uid for c in claims}


def test_one_claim_prepared_by_two_calls_at_once_is_prepared_once(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    preparer = node.preparer()
    holder = hold_lock(node.plugin_dir / "pu.lock")
    results: list[PrepareResult] = []
    threads = [threading.Thread(target=lambda: results.append(preparer.prepare([claim])[claim.uid]))]
    threads.append(threading.Thread(target=lambda: results.append(preparer.prepare([claim])[claim.uid])))
    try:
        for t in threads:
            t.start()
        wait_until_fetched(node, 2)
    finally:
        holder.communicate("")
    for t in threads:
        t.join(10)

    expected = PrepareResult(devices=prepared(claim, ("gpu-0", ("gpus",))))
    assert results == [expected, expected]
    assert list(node.checkpoint().claims) == [claim.uid]
