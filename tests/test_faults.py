"""Fault annotations: parsing and checks (claim and node), their effect on Prepare/Unprepare, slices and
health, and the `fakeplugin fault` command's checks."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from fakeplugin.commands import fault
from fakeplugin.faults.claimfaults import (
    ClaimFaultError,
    ClaimFaults,
    FailCounts,
    QuietClaims,
    claim_faults,
    parse_duration,
)
from fakeplugin.faults.devicefaults import DeviceFault, DeviceFaultError, parse_device_faults
from fakeplugin.faults.devicehealth import HEALTHY, UNHEALTHY, Health
from fakeplugin.faults.fabricfaults import (
    EVERY_GPU,
    FabricFault,
    FabricFaultError,
    fault_of,
    parse_fabric_faults,
)
from fakeplugin.model import ClaimRef
from fakeplugin.server.device_health import api_pb2, report
from fakeplugin.telemetry import load
from tests.harness import DRIVER
from tests.harness.prepare import BOOT, Node, claim_object, result

# ---- claim annotations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("250ms", 0.25),
        ("3s", 3.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("10m", 600.0),
        ("2us", 2e-6),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "-3s", "3 s", "3d", "s", "1m30", "+1s"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="Go duration"):
        parse_duration(text)


def test_claim_faults_from_annotations() -> None:
    assert claim_faults(None) == ClaimFaults()
    assert claim_faults(
        {
            "fakeplugin.dev/prepare-error": "boom",
            "fakeplugin.dev/prepare-fail-count": "2",
            "fakeplugin.dev/prepare-delay": "250ms",
            "fakeplugin.dev/unprepare-error": "stuck",
            "other.io/x": "ignored",
        }
    ) == ClaimFaults("boom", 2, 0.25, "stuck")


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        (
            "prepare-fail-count",
            "two",
            "annotation fakeplugin.dev/prepare-fail-count: 'two': expected a whole",
        ),
        ("prepare-fail-count", "-1", "'-1'"),
        ("prepare-fail-count", "1001", "from 0 to 1000"),
        ("prepare-delay", "soon", "annotation fakeplugin.dev/prepare-delay: not a Go duration"),
        ("prepare-delay", "11m", "annotation fakeplugin.dev/prepare-delay: '11m': at most 10m"),
        ("prepare-error", " ", "annotation fakeplugin.dev/prepare-error: ' ': the message must not be empty"),
        ("unprepare-error", "x" * 2000, "annotation fakeplugin.dev/unprepare-error: message of 2000"),
    ],
)
def test_bad_claim_annotations_name_annotation_and_value(key: str, value: str, expected: str) -> None:
    with pytest.raises(ClaimFaultError) as info:
        claim_faults({f"fakeplugin.dev/{key}": value})
    assert expected in str(info.value)


def test_fail_counts_count_failing_attempts_per_claim() -> None:
    counts = FailCounts(max_claims=2)
    assert [counts.attempt("a", 2) for _ in range(4)] == [1, 2, 0, 0]
    assert counts.attempt("b", 1) == 1
    assert counts.attempt("c", 1) == 1  # "a" is forgotten: the oldest
    assert counts.attempt("a", 1) == 1


# ---- Prepare / Unprepare ---------------------------------------------------------------------------------


@pytest.fixture
def node(tmp_path: Path) -> Node:
    """A node as tests/test_prepare.py's: claims served from memory, files under tmp_path."""
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def annotated(node: Node, n: int, annotations: dict[str, str]) -> ClaimRef:
    ref = ClaimRef(namespace="ns", name=f"claim-{n}", uid=f"0000000{n}-aaaa-4bbb-8ccc-dddddddddddd")
    node.add(ref, result(f"gpu-{n}"))
    node.claims[("ns", ref.name)]["metadata"]["annotations"] = annotations
    return ref


def test_prepare_error_fails_only_that_claim(node: Node) -> None:
    broken = annotated(node, 1, {"fakeplugin.dev/prepare-error": "injected: GPU busy"})
    fine = annotated(node, 2, {})
    results = node.preparer().prepare([broken, fine])
    assert results[broken.uid].error == f"error preparing devices for claim {broken}: injected: GPU busy"
    assert results[fine.uid].error == ""
    assert set(node.checkpoint().claims) == {fine.uid}


def test_prepare_fail_count_then_success(node: Node) -> None:
    ref = annotated(node, 1, {"fakeplugin.dev/prepare-fail-count": "2"})
    preparer = node.preparer()
    errors = [preparer.prepare([ref])[ref.uid].error for _ in range(3)]
    assert "prepare-fail-count: attempt 1 of 2 fails" in errors[0]
    assert "prepare-fail-count: attempt 2 of 2 fails" in errors[1]
    assert errors[2] == ""


def test_prepare_fail_count_with_a_message_fails_that_often_with_it(node: Node) -> None:
    faults = {"fakeplugin.dev/prepare-fail-count": "1", "fakeplugin.dev/prepare-error": "XID 79 at init"}
    ref = annotated(node, 1, faults)
    preparer = node.preparer()
    errors = [preparer.prepare([ref])[ref.uid].error for _ in range(2)]
    assert errors == [f"error preparing devices for claim {ref}: XID 79 at init", ""]


def test_prepare_delay_sleeps_in_the_callers_thread(node: Node) -> None:
    slept: list[float] = []
    ref = annotated(node, 1, {"fakeplugin.dev/prepare-delay": "1m30s"})
    assert node.preparer(sleep=slept.append).prepare([ref])[ref.uid].error == ""
    assert slept == [90.0]


def test_bad_claim_annotation_fails_the_claim_with_a_clear_message(node: Node) -> None:
    ref = annotated(node, 1, {"fakeplugin.dev/prepare-delay": "forever"})
    error = node.preparer().prepare([ref])[ref.uid].error
    assert "annotation fakeplugin.dev/prepare-delay: not a Go duration" in error and "'forever'" in error


def test_unprepare_error_set_at_prepare_until_removed(node: Node) -> None:
    ref = annotated(node, 1, {"fakeplugin.dev/unprepare-error": "stuck"})
    preparer = node.preparer()
    assert preparer.prepare([ref])[ref.uid].error == ""
    assert preparer.unprepare([ref]) == {ref.uid: f"error unpreparing devices for claim {ref}: stuck"}
    assert set(node.checkpoint().claims) == {ref.uid}  # nothing undone

    del node.claims[("ns", ref.name)]  # the claim is gone: no fault
    assert preparer.unprepare([ref]) == {ref.uid: ""}
    assert node.checkpoint().claims == {}


def test_unprepare_of_a_claim_without_faults_at_prepare_reads_nothing(node: Node) -> None:
    ref = annotated(node, 1, {})
    preparer = node.preparer()
    assert preparer.prepare([ref])[ref.uid].error == ""
    node.claims[("ns", ref.name)]["metadata"]["annotations"] = {"fakeplugin.dev/unprepare-error": "late"}
    node.fetched.clear()
    assert preparer.unprepare([ref]) == {ref.uid: ""}  # added after Prepare, the node did not opt in
    assert node.fetched == []
    assert node.checkpoint().claims == {}


def test_a_node_that_opted_in_reads_every_unprepares_claim(node: Node) -> None:
    opted_in = [False]
    first, second = annotated(node, 1, {}), annotated(node, 2, {})
    preparer = node.preparer(read_unprepare_faults=lambda: opted_in[0])
    preparer.prepare([first, second])
    node.claims[("ns", first.name)]["metadata"]["annotations"] = {"fakeplugin.dev/unprepare-error": "stuck"}
    opted_in[0] = True  # fakeplugin.dev/unprepare-faults on the Node, after Prepare
    node.fetched.clear()
    assert preparer.unprepare([first, second]) == {
        first.uid: f"error unpreparing devices for claim {first}: stuck",
        second.uid: "",
    }
    assert node.fetched == [("ns", first.name), ("ns", second.name)]
    assert set(node.checkpoint().claims) == {first.uid}


def test_claims_prepared_before_a_restart_are_read_at_unprepare(node: Node) -> None:
    ref = annotated(node, 1, {})
    node.preparer().prepare([ref])
    node.claims[("ns", ref.name)]["metadata"]["annotations"] = {"fakeplugin.dev/unprepare-error": "stuck"}
    restarted = node.preparer()  # knows nothing of the claim's annotations at its Prepare
    assert restarted.unprepare([ref]) == {ref.uid: f"error unpreparing devices for claim {ref}: stuck"}


def test_quiet_claims_are_bounded_and_taken_once() -> None:
    quiet = QuietClaims(max_claims=2)
    for uid in ("a", "b", "c"):
        quiet.mark(uid, True)
    quiet.mark("c", False)
    assert [quiet.take(uid) for uid in ("a", "b", "c", "b")] == [False, True, False, False]


def test_unprepare_ignores_a_new_claim_of_the_same_name(node: Node) -> None:
    ref = annotated(node, 1, {"fakeplugin.dev/unprepare-error": "mine, removed later"})
    preparer = node.preparer()
    preparer.prepare([ref])
    newer = claim_object(ClaimRef("ns", ref.name, "00000009-aaaa-4bbb-8ccc-dddddddddddd"), result("gpu-1"))
    newer["metadata"]["annotations"] = {"fakeplugin.dev/unprepare-error": "not mine"}
    node.claims[("ns", ref.name)] = newer
    assert preparer.unprepare([ref]) == {ref.uid: ""}


# ---- node annotation -------------------------------------------------------------------------------------


def test_device_faults_parse() -> None:
    assert parse_device_faults(None) == {}
    assert parse_device_faults("gpu-0=xid:79, gpu-1=gpu-lost,gpu-1=xid:13,gpu-0=xid:48") == {
        "gpu-0": DeviceFault(48),  # the later XID wins, as upstream's AddOrUpdateTaint
        "gpu-1": DeviceFault(13, lost=True),
    }


@pytest.mark.parametrize(
    "value", ["gpu-0", "gpu-0=xid", "gpu-0=xid:-1", "=gpu-lost", "gpu-0=ecc", "gpu-0=xid:7,"]
)
def test_bad_device_faults_name_annotation_and_entry(value: str) -> None:
    with pytest.raises(DeviceFaultError, match=f"annotation fakeplugin.dev/device-faults: {value!r}: entry"):
        parse_device_faults(value)


def test_taints_and_health_as_the_real_driver() -> None:
    assert DeviceFault(79).taints(DRIVER) == [{"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"}]
    assert DeviceFault(13).taints("gpu.nvidia.com") == [
        {"key": "gpu.nvidia.com/xid", "value": "13", "effect": "None"}
    ]
    assert DeviceFault(lost=True).taints("gpu.nvidia.com") == [
        {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    ]
    assert (DeviceFault(79).healthy, DeviceFault(79).message) == (False, "critical XID 79 reported by NVML")
    assert (DeviceFault(31).healthy, DeviceFault(31).message) == (True, "non-fatal XID 31 reported by NVML")
    assert (DeviceFault(lost=True).healthy, DeviceFault(lost=True).message) == (False, "GPU is lost")


def test_a_1_34_api_server_gets_no_taint_for_a_skipped_xid() -> None:
    """1.34 has no `None` effect: its API server would refuse the whole slice."""
    assert DeviceFault(13).taints(DRIVER, (1, 34)) == []
    assert DeviceFault(79, lost=True).taints(DRIVER, (1, 34)) == [
        {"key": f"{DRIVER}/xid", "value": "79", "effect": "NoSchedule"},
        {"key": f"{DRIVER}/gpu-lost", "effect": "NoSchedule"},
    ]
    assert DeviceFault(13).taints(DRIVER, (1, 35))[0]["effect"] == "None"


def test_node_devices_taint_slices_and_keep_the_last_good_faults(tmp_path: Path) -> None:
    from fakeplugin.drivers.gpu.publish.node import NodeDevices

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        'driverVersion: "580.126.20"\ncudaDriverVersion: "13.0"\n'
        "nodes:\n- name: n1\n  gpus: [{profile: t10, count: 2}]\n"
    )
    devices = NodeDevices(inventory, "n1", driver="gpu.nvidia.com")
    assert devices.set_node({}, "uid-1", {"fakeplugin.dev/device-faults": "gpu-1=gpu-lost"})

    def taints() -> dict[str, Any]:
        return {d["name"]: d.get("taints") for s in devices.desired_slices() for d in s["spec"]["devices"]}

    lost = [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]
    assert taints() == {"gpu-0": None, "gpu-1": lost}
    assert not devices.set_node({}, "uid-1", {"fakeplugin.dev/device-faults": "gpu-1=oops"})  # logged
    assert taints() == {"gpu-0": None, "gpu-1": lost}
    assert devices.set_node({}, "uid-1", {})
    assert taints() == {"gpu-0": None, "gpu-1": None}
    assert devices.fault("gpu-1") is None


def test_health_report_shows_faulted_devices() -> None:
    health = [("gpu-0", Health(HEALTHY)), ("gpu-1", Health(UNHEALTHY, "GPU is lost"))]
    response = report("n1", health, 7)
    assert [(d.device.device_name, d.health, d.message) for d in response.devices] == [
        ("gpu-0", api_pb2.HEALTHY, ""),
        ("gpu-1", api_pb2.UNHEALTHY, "GPU is lost"),
    ]


# ---- fakeplugin fault ------------------------------------------------------------------------------------


def claim_args(**kw: Any) -> argparse.Namespace:
    defaults = dict.fromkeys(
        ("prepare_error", "prepare_fail_count", "prepare_delay", "unprepare_error", "gpu_load")
    )
    return argparse.Namespace(**({"clear": False} | defaults | kw))


def test_fault_claim_patches() -> None:
    assert fault.claim_annotations(claim_args(prepare_delay="3s")) == {"fakeplugin.dev/prepare-delay": "3s"}
    assert fault.claim_annotations(claim_args(clear=True)) == {
        "fakeplugin.dev/prepare-error": None,
        "fakeplugin.dev/prepare-fail-count": None,
        "fakeplugin.dev/prepare-delay": None,
        "fakeplugin.dev/unprepare-error": None,
        "fakeplugin.dev/gpu-load": None,
    }
    with pytest.raises(ValueError, match="prepare-fail-count: 'x'"):
        fault.claim_annotations(claim_args(prepare_fail_count="x"))
    with pytest.raises(ValueError, match="--clear or at least one"):
        fault.claim_annotations(claim_args())


def test_fault_gpu_load_patches() -> None:
    """--gpu-load on a claim or a pod: checked (0-100) before anything is sent, removed by --clear."""
    assert fault.GPU_LOAD == load.ANNOTATION  # named in fault.py so that `serve` need not load telemetry
    assert fault.claim_annotations(claim_args(gpu_load="90")) == {"fakeplugin.dev/gpu-load": "90"}
    pod = argparse.Namespace(clear=False, gpu_load="utilization=80,memory=30")
    assert fault.pod_annotations(pod) == {"fakeplugin.dev/gpu-load": "utilization=80,memory=30"}
    assert fault.pod_annotations(argparse.Namespace(clear=True, gpu_load=None)) == {
        "fakeplugin.dev/gpu-load": None
    }
    with pytest.raises(ValueError, match="utilization '101' is not a whole number 0 to 100"):
        fault.claim_annotations(claim_args(gpu_load="101"))
    bad = re.escape("--gpu-load: annotation fakeplugin.dev/gpu-load='util=5'")
    with pytest.raises(ValueError, match=bad):
        fault.pod_annotations(argparse.Namespace(clear=False, gpu_load="util=5"))
    with pytest.raises(ValueError, match="--clear or --gpu-load"):
        fault.pod_annotations(argparse.Namespace(clear=False, gpu_load=None))


def test_fault_node_annotation() -> None:
    args = argparse.Namespace(clear=False, xid=["gpu-1=79"], gpu_lost=["gpu-0"])
    assert fault.node_annotation(args) == "gpu-1=xid:79,gpu-0=gpu-lost"
    assert fault.node_annotation(argparse.Namespace(clear=True, xid=[], gpu_lost=[])) is None
    with pytest.raises(ValueError, match="--xid 'gpu-1': expected DEVICE=N"):
        fault.node_annotation(argparse.Namespace(clear=False, xid=["gpu-1"], gpu_lost=[]))


# ---- the NVLink fabric (fakeplugin.dev/fabric-state) -------------------------------------------------------


def test_fabric_faults_parse() -> None:
    assert parse_fabric_faults(None) == parse_fabric_faults(" ") == {}
    assert parse_fabric_faults("InProgress") == {EVERY_GPU: FabricFault("InProgress")}
    faults = parse_fabric_faults("NotStarted, gpu-2=Completed:ERROR_TIMEOUT")
    assert faults == {
        EVERY_GPU: FabricFault("NotStarted"),
        "gpu-2": FabricFault("Completed", "ERROR_TIMEOUT"),
    }
    assert fault_of(faults, "gpu-2") == FabricFault("Completed", "ERROR_TIMEOUT")
    assert fault_of(faults, "gpu-0") == FabricFault("NotStarted")  # the node-wide entry
    assert fault_of({"gpu-1": FabricFault("InProgress")}, "gpu-0") is None
    assert faults["gpu-2"].status_text == "Timeout"  # nvmlErrorString
    assert FabricFault("InProgress").status_text == "N/A"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("Broken", "state 'Broken': expected one of NotStarted, InProgress, Completed"),
        ("Completed", "Completed needs an error status, Completed:<one of ERROR_TIMEOUT,"),
        ("Completed:SUCCESS", "Completed needs an error status"),
        ("InProgress:ERROR_TIMEOUT", "InProgress has no status (only Completed:<error> does)"),
        ("=InProgress", "expected STATE or DEVICE=STATE, e.g. gpu-0=InProgress"),
        ("gpu-0=InProgress,gpu-0=NotStarted", "gpu-0 named twice"),
        ("InProgress,NotStarted", "every GPU named twice"),
        ("gpu-0=InProgress,", "state '': expected one of"),
    ],
)
def test_bad_fabric_faults_name_annotation_and_entry(value: str, why: str) -> None:
    with pytest.raises(FabricFaultError) as e:
        parse_fabric_faults(value)
    assert str(e.value).startswith(f"annotation fakeplugin.dev/fabric-state: {value!r}: entry ")
    assert why in str(e.value)


def test_node_devices_show_the_fabric_fault_and_keep_the_last_good_one(tmp_path: Path) -> None:
    from fakeplugin.drivers.gpu.publish.node import NodeDevices

    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        'driverVersion: "580.126.20"\ncudaDriverVersion: "13.0"\nnodes:\n'
        "- name: n1\n  gpus: [{profile: gb200, count: 2}]\n  fabric: {clique: 3}\n"
    )
    devices = NodeDevices(inventory, "n1", driver="gpu.nvidia.com")

    def states() -> list[tuple[str, str, str]]:
        snapshot = devices.snapshot()
        fabrics = [snapshot[name].board.fabric for name in sorted(snapshot)]
        return [(f.state, f.status, str(f.clique)) for f in fabrics if f is not None]

    assert states() == [("Completed", "Success", "3")] * 2
    devices.set_node({}, "uid-1", {"fakeplugin.dev/fabric-state": "gpu-1=InProgress"})
    assert states() == [("Completed", "Success", "3"), ("In Progress", "N/A", "3")]
    devices.set_node({}, "uid-1", {"fakeplugin.dev/fabric-state": "gpu-1=Stuck"})  # logged, ignored
    assert states() == [("Completed", "Success", "3"), ("In Progress", "N/A", "3")]
    devices.set_node({}, "uid-1", {"fakeplugin.dev/fabric-state": "Completed:ERROR_UNKNOWN"})
    assert states() == [("Completed", "Unknown Error", "3")] * 2
    devices.set_node({}, "uid-1", {})
    assert states() == [("Completed", "Success", "3")] * 2


def cd_args(**kw: Any) -> argparse.Namespace:
    defaults = dict.fromkeys(("fabric_state", "daemon_not_ready", "left_clique", "daemon_failed"))
    return argparse.Namespace(**({"clear": False} | defaults | kw))


def test_fault_compute_domain_annotations() -> None:
    assert fault.compute_domain_annotations(cd_args(fabric_state="gpu-1=InProgress")) == {
        "fakeplugin.dev/fabric-state": "gpu-1=InProgress"
    }
    assert fault.compute_domain_annotations(cd_args(daemon_not_ready="down", left_clique="tray")) == {
        "fakeplugin.dev/compute-domain-daemon-not-ready": "down",
        "fakeplugin.dev/compute-domain-daemon-left-clique": "tray",
    }
    assert fault.compute_domain_annotations(cd_args(daemon_failed="IMEX session in use")) == {
        "fakeplugin.dev/compute-domain-daemon-failed": "IMEX session in use"
    }
    assert fault.compute_domain_annotations(cd_args(clear=True)) == {
        "fakeplugin.dev/fabric-state": None,
        "fakeplugin.dev/compute-domain-daemon-not-ready": None,
        "fakeplugin.dev/compute-domain-daemon-left-clique": None,
        "fakeplugin.dev/compute-domain-daemon-failed": None,
    }
    with pytest.raises(ValueError, match="fabric-state: 'Completed': entry 'Completed': Completed needs"):
        fault.compute_domain_annotations(cd_args(fabric_state="Completed"))
    with pytest.raises(ValueError, match=r"fabric-state: give a state, e\.g\. InProgress"):
        fault.compute_domain_annotations(cd_args(fabric_state=" "))
    with pytest.raises(ValueError, match="compute-domain-daemon-left-clique: give a reason"):
        fault.compute_domain_annotations(cd_args(left_clique=""))
    with pytest.raises(ValueError, match="compute-domain-daemon-failed: give a reason"):
        fault.compute_domain_annotations(cd_args(daemon_failed=" "))
    with pytest.raises(ValueError, match="--clear or at least one"):
        fault.compute_domain_annotations(cd_args())
    with pytest.raises(ValueError, match="--clear or at least one"):
        fault.compute_domain_annotations(cd_args(clear=True, left_clique="x"))


def test_fault_compute_domain_parses_and_the_testing_api_annotates() -> None:
    from fakeplugin.cli import build_parser
    from fakeplugin.testing import Faults

    args = build_parser().parse_args(["fault", "compute-domain", "gb200-0", "--fabric-state", "InProgress"])
    assert (args.node, args.func) == ("gb200-0", fault.run_compute_domain)
    calls: list[tuple[str, ...]] = []
    faults = Faults(lambda *a: calls.append(a))  # type: ignore[arg-type,func-returns-value]
    faults.set_fabric_state("n1", "gpu-0=NotStarted")
    faults.daemon_not_ready("n1", "imex down")
    faults.leave_clique("n1")
    faults.daemon_failed("n1", "imex session in use")
    faults.clear_compute_domain("n1")
    assert calls == [
        ("annotate", "--overwrite", "node", "n1", "fakeplugin.dev/fabric-state=gpu-0=NotStarted"),
        ("annotate", "--overwrite", "node", "n1", "fakeplugin.dev/compute-domain-daemon-not-ready=imex down"),
        ("annotate", "--overwrite", "node", "n1", "fakeplugin.dev/compute-domain-daemon-left-clique=test"),
        (
            "annotate",
            "--overwrite",
            "node",
            "n1",
            "fakeplugin.dev/compute-domain-daemon-failed=imex session in use",
        ),
        (
            "annotate",
            "--overwrite",
            "node",
            "n1",
            "fakeplugin.dev/fabric-state-",
            "fakeplugin.dev/compute-domain-daemon-not-ready-",
            "fakeplugin.dev/compute-domain-daemon-left-clique-",
            "fakeplugin.dev/compute-domain-daemon-failed-",
        ),
    ]


def test_fault_pod_parses_and_the_testing_api_sets_the_gpu_load() -> None:
    from fakeplugin.cli import build_parser
    from fakeplugin.testing import Faults

    args = build_parser().parse_args(["fault", "pod", "team-a/trainer-0", "--gpu-load", "75"])
    assert (args.pod, args.gpu_load, args.func) == ("team-a/trainer-0", "75", fault.run_pod)
    calls: list[tuple[str, ...]] = []
    faults = Faults(lambda *a: calls.append(a))  # type: ignore[arg-type,func-returns-value]
    faults.set_gpu_load("claim", "team-a", "big-gpu", 90, memory=40)
    faults.set_gpu_load("pod", "team-a", "trainer-0", 75)
    faults.clear_gpu_load("pod", "team-a", "trainer-0")
    assert calls == [
        ("annotate", "--overwrite", "resourceclaim", "big-gpu", "-n", "team-a",
         "fakeplugin.dev/gpu-load=utilization=90,memory=40"),
        ("annotate", "--overwrite", "pod", "trainer-0", "-n", "team-a",
         "fakeplugin.dev/gpu-load=utilization=75"),
        ("annotate", "--overwrite", "pod", "trainer-0", "-n", "team-a", "fakeplugin.dev/gpu-load-"),
    ]  # fmt: skip
    with pytest.raises(load.LoadError, match="utilization 101: a whole number of percent, 0 to 100"):
        faults.set_gpu_load("pod", "team-a", "trainer-0", 101)
    with pytest.raises(ValueError, match="gpu load: kind 'node': one of pod, claim"):
        faults.set_gpu_load("node", "", "n1", 5)
    assert len(calls) == 3  # nothing sent for a bad value
