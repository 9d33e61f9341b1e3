"""Prepare with consumable shares (release 0.5.0-dev, main 95932046) over real files: a device prepared for
one claim is prepared for another when both claims' normalized configs for it agree, else the real error;
MPS is refused; admin access and the default (disabled) keep the rules of tests/test_prepare.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fakeplugin import featuregates, releases
from fakeplugin.drivers.gpu.prepare import cdispec
from fakeplugin.drivers.gpu.prepare import checkpoint as cp
from fakeplugin.drivers.gpu.prepare.preparer import GpuPreparer
from fakeplugin.model import ClaimState, PrepareResult
from tests.harness import DRIVER
from tests.harness.prepare import BOOT, Node, gpu, opaque, prepared, ref, result, timeslicing, with_configs

DEV = releases.get("0.5.0-dev")
GATES = featuregates.parse("ConsumableShares=true,TimeSlicingSettings=true,MPSSupport=true", DEV)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.boot_id_file.write_text(BOOT + "\n")
    return n


def shared(node: Node, mode: str = "memory", **overrides: Any) -> GpuPreparer:
    return node.preparer(feature_gates=GATES, release=DEV, consumable_shares=mode, **overrides)


def test_two_claims_share_a_device_each_with_its_own_spec(node: Node) -> None:
    first, second = node.add(ref(1), result("gpu-0")), node.add(ref(2), result("gpu-0"))
    preparer = shared(node)

    assert preparer.prepare([first]) == {
        first.uid: PrepareResult(devices=prepared(first, ("gpu-0", ("gpus",))))
    }
    assert preparer.prepare([second]) == {
        second.uid: PrepareResult(devices=prepared(second, ("gpu-0", ("gpus",))))
    }

    for claim in (first, second):
        spec = yaml.safe_load(node.spec_path(claim).read_text())
        assert spec == cdispec.claim_spec(claim.uid, [gpu(0)], driver_name=DRIVER, plugin_dir=node.plugin_dir)
    stored = json.loads((node.plugin_dir / cp.FILE_NAME).read_text())["preparedClaims"]
    assert stored[first.uid]["configs"] == {"gpu-0": {"kind": "GpuConfig", "spec": {}}}
    assert node.checkpoint().claims[second.uid].configs == {"gpu-0": {"kind": "GpuConfig", "spec": {}}}


def test_equal_explicit_configs_agree_and_a_different_one_conflicts(node: Node) -> None:
    first, same, other = (node.add(ref(n), result("gpu-0", "gpu")) for n in (1, 2, 3))
    for claim in (first, same):
        with_configs(node, claim, opaque(timeslicing("Long"), "gpu"))
    with_configs(node, other, opaque(timeslicing("Short"), "gpu"))
    plain = node.add(ref(4), result("gpu-0", "gpu"))  # the implicit default GpuConfig{}
    preparer = shared(node)
    preparer.prepare([first])

    results = {**preparer.prepare([same]), **preparer.prepare([other]), **preparer.prepare([plain])}

    assert results[same.uid].error == ""
    for claim in (other, plain):
        assert results[claim.uid].error == (
            f"error preparing devices for claim ns/{claim.name}:{claim.uid}: unable to prepare claim "
            f"{claim.uid}: requested device gpu-0 has conflicting configuration with already prepared claim "
            f"{first.uid}"
        )
        assert not node.spec_path(claim).exists()


def test_a_config_the_driver_cannot_resolve_fails_the_overlap_check(node: Node) -> None:
    first, bad = node.add(ref(1), result("gpu-0", "gpu")), node.add(ref(2), result("gpu-0", "gpu"))
    with_configs(node, bad, opaque({**timeslicing("Long"), "x": 1}, "gpu"))
    preparer = shared(node)
    preparer.prepare([first])

    error = preparer.prepare([bad])[bad.uid].error

    assert error.endswith(
        f"unable to prepare claim {bad.uid}: error resolving config for incoming claim {bad.uid} on device "
        "gpu-0: error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "x"'
    )


def test_mps_is_refused_with_consumable_shares(node: Node) -> None:
    claim = node.add(ref(1), result("gpu-0"))
    with_configs(node, claim, opaque({"kind": "GpuConfig", "sharing": {"strategy": "MPS"}}))

    error = shared(node, "unlimited").prepare([claim])[claim.uid].error

    assert error == (
        f"error preparing devices for claim ns/claim-1:{claim.uid}: prepare devices failed: "
        "error applying config: MPS sharing is not supported when consumable shares is enabled"
    )
    assert node.checkpoint().claims[claim.uid].state is ClaimState.PREPARE_STARTED


def test_a_claim_prepared_before_shares_were_on_never_agrees(node: Node) -> None:
    first, second = node.add(ref(1), result("gpu-0")), node.add(ref(2), result("gpu-0"))
    node.preparer(feature_gates=GATES, release=DEV).prepare([first])  # disabled: no configs kept
    assert "configs" not in (node.plugin_dir / cp.FILE_NAME).read_text()

    error = shared(node).prepare([second])[second.uid].error

    assert error.endswith(
        f"requested device gpu-0 has conflicting configuration with already prepared claim {first.uid}"
    )


def test_claims_of_one_batch_share_a_device(node: Node) -> None:
    claims = [node.add(ref(n), result("gpu-1")) for n in range(1, 5)]

    results = shared(node).prepare(claims)

    assert [results[c.uid].error for c in claims] == [""] * 4
    assert len(node.checkpoint().claims) == 4


def test_the_overlapping_devices_config_is_validated_in_the_overlap_check(node: Node) -> None:
    first, sliced = node.add(ref(1), result("gpu-0", "gpu")), node.add(ref(2), result("gpu-0", "gpu"))
    with_configs(node, sliced, opaque(timeslicing("Long"), "gpu"))
    gates = featuregates.parse("ConsumableShares=true", DEV)  # TimeSlicingSettings off
    preparer = node.preparer(feature_gates=gates, release=DEV, consumable_shares="memory")
    preparer.prepare([first])

    error = preparer.prepare([sliced])[sliced.uid].error

    assert error.endswith(
        f"error resolving config for incoming claim {sliced.uid} on device gpu-0: error validating config: "
        '"TimeSlicing" is selected as the GPU sharing strategy, but the "TimeSlicingSettings" feature gate '
        "is not enabled"
    )
