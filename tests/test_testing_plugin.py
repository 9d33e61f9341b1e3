"""fakeplugin.testing without a cluster: the pure helpers, and the pytest plugin's promise to users who
do not use its fixtures (nothing started, nothing heavy imported)."""

from __future__ import annotations

import pytest

from fakeplugin.testing import Allocated, seed_lab_inventory
from fakeplugin.testing.containers import container_claims
from fakeplugin.testing.objects import allocated, as_objects, container_gpus, object_ref

pytest_plugins = ["pytester"]


def test_objects_from_yaml_documents_dicts_and_lists() -> None:
    text = "kind: Namespace\nmetadata: {name: a}\n---\n---\nkind: List\n"
    text += "items:\n- {kind: Pod, metadata: {name: p}}\n"
    assert [o["kind"] for o in as_objects(text)] == ["Namespace", "Pod"]
    assert as_objects({"kind": "Pod", "metadata": {"name": "p"}}) == [
        {"kind": "Pod", "metadata": {"name": "p"}}
    ]
    with pytest.raises(ValueError, match="no kind"):
        as_objects([{"metadata": {}}])


def test_allocated_devices_name_their_node_from_the_slices() -> None:
    claim = {"status": {"allocation": {"devices": {"results": [
        {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1", "request": "gpu"},
        {"driver": "net.example.com", "pool": "fabric", "device": "nic-0", "request": "nic"},
    ]}}}}  # fmt: skip
    slices = [{"spec": {"driver": "gpu.nvidia.com", "pool": {"name": "n1"}, "nodeName": "node-1"}}]
    assert allocated(claim, slices) == [
        Allocated("node-1", "n1", "gpu-1", "gpu"),
        Allocated("fabric", "fabric", "nic-0", "nic"),  # no slice names a node: the pool stands in
    ]
    assert allocated({"status": {}}, slices) == []


def test_object_refs() -> None:
    assert object_ref("pod/x") == ("pod", "x")
    assert object_ref({"kind": "ResourceClaim", "metadata": {"name": "c"}}) == ("ResourceClaim", "c")
    with pytest.raises(ValueError, match="want kind/name"):
        object_ref("x")


def test_the_shipped_seed_lab_is_the_default_inventory() -> None:
    assert "capi-dralabs-md-gput10-gzl84-f2m2d" in seed_lab_inventory().read_text()


def test_a_session_without_its_fixtures_starts_and_imports_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import sys

        def test_plain(pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("fakeplugin")  # loaded by the entry point
            assert "fakeplugin.cluster" not in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("--fakeplugin-simulated-nodes=2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_options_come_from_the_command_line_or_the_ini_file(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfakeplugin_inventory = lab.yaml\nfakeplugin_simulated_nodes = 3\n")
    pytester.makepyfile(
        """
        from pathlib import Path
        from fakeplugin.testing.pytest_plugin import option

        def test_options(pytestconfig, fakeplugin_inventory, fakeplugin_config):
            assert fakeplugin_inventory == fakeplugin_config == Path("lab.yaml")
            assert option(pytestconfig, "simulated-nodes") == "3"
            assert option(pytestconfig, "kubernetes-feature-gates") == "A=true"
            assert option(pytestconfig, "kubeconfig") == "/k"
        """
    )
    assert "--fakeplugin-kubeconfig" in pytester.runpytest_subprocess("--help").stdout.str()
    pytester.runpytest_subprocess(
        "--fakeplugin-kubeconfig=/k", "--fakeplugin-kubernetes-feature-gates=A=true"
    ).assert_outcomes(passed=1)


def test_the_old_option_names_still_work(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfakeplugin_config = lab.yaml\nfakeplugin_workers = 3\n")
    pytester.makepyfile(
        """
        from pathlib import Path
        from fakeplugin.testing.pytest_plugin import option

        def test_options(pytestconfig, fakeplugin_inventory):
            assert fakeplugin_inventory == Path("lab.yaml")
            assert option(pytestconfig, "simulated-nodes") == "3"
            assert option(pytestconfig, "kubernetes-feature-gates") == "B=false"
        """
    )
    result = pytester.runpytest_subprocess("--fakeplugin-feature-gates=B=false", "--help")
    assert "deprecated: use --fakeplugin-inventory" in result.stdout.str()
    pytester.runpytest_subprocess("--fakeplugin-feature-gates=B=false").assert_outcomes(passed=1)


def test_container_gpus_are_the_devices_the_containers_cdi_edits_named() -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "FAKEPLUGIN_CLAIM_UID": "u1",
        "FAKEPLUGIN_GPU_1_UUID": "GPU-b",
        "FAKEPLUGIN_GPU_1_DEVICE": "gpu-1",
        "FAKEPLUGIN_GPU_1_SHARING_STRATEGY": "MPS",
        "FAKEPLUGIN_GPU_0_MIG_19_2_UUID": "MIG-a",
        "FAKEPLUGIN_GPU_0_MIG_19_2_DEVICE": "gpu-0-mig-1g5gb-19-2",
    }
    assert container_gpus(env) == {"gpu-0-mig-1g5gb-19-2": "MIG-a", "gpu-1": "GPU-b"}
    assert container_gpus({"NVIDIA_VISIBLE_DEVICES": "void"}) == {}


def test_container_claims_resolve_template_and_extended_resource_claims_as_the_kubelet() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "own", "resourceClaimName": "c1"},
            ],
            "containers": [
                {"name": "a", "resources": {"claims": [{"name": "gpu", "request": "r0"}, {"name": "own"}]}},
                {"name": "b"},
            ],
        },
        "status": {
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "pod-gpu-x1"}],
            "extendedResourceClaimStatus": {
                "resourceClaimName": "pod-extended-resources-y2",
                "requestMappings": [
                    {"containerName": "b", "resourceName": "nvidia.com/gpu", "requestName": "c-0"}
                ],
            },
        },
    }
    assert container_claims(pod, "a") == [("pod-gpu-x1", "r0"), ("c1", "")]
    assert container_claims(pod, "b") == [("pod-extended-resources-y2", "c-0")]
