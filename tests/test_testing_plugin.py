"""fakeplugin.testing without a cluster: the pure helpers and object builders, and the pytest plugin's
promise to users who do not use its fixtures (nothing started, nothing heavy imported)."""

from __future__ import annotations

import pytest

import fakeplugin.testing
from fakeplugin.testing import (
    Allocated,
    claim_pod,
    container,
    device_request,
    opaque_config,
    pod,
    resource_claim,
    resource_claim_template,
    seed_lab_inventory,
)
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

        def test_options(pytestconfig, fakeplugin_inventory):
            assert fakeplugin_inventory == Path("lab.yaml")
            assert option(pytestconfig, "simulated-nodes") == "3"
            assert option(pytestconfig, "kubernetes-feature-gates") == "A=true"
            assert option(pytestconfig, "kubeconfig") == "/k"
        """
    )
    assert "--fakeplugin-kubeconfig" in pytester.runpytest_subprocess("--help").stdout.str()
    pytester.runpytest_subprocess(
        "--fakeplugin-kubeconfig=/k", "--fakeplugin-kubernetes-feature-gates=A=true"
    ).assert_outcomes(passed=1)


def test_the_old_option_names_are_gone(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_nothing():\n    pass\n")
    help_text = pytester.runpytest_subprocess("--help").stdout.str()
    assert "--fakeplugin-simulated-nodes" in help_text
    for old in ("--fakeplugin-config", "--fakeplugin-workers", "--fakeplugin-feature-gates", "deprecated"):
        assert old not in help_text
    result = pytester.runpytest_subprocess("--fakeplugin-workers=3")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized arguments: --fakeplugin-workers=3*"])


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


def test_every_exported_name_resolves() -> None:
    for name in fakeplugin.testing.__all__:
        assert getattr(fakeplugin.testing, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = fakeplugin.testing.nope


T10 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA T10'"


def test_a_device_request_spells_each_option_as_the_api_does() -> None:
    assert device_request() == {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    taint = {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}
    assert device_request(
        "shared",
        "mig.nvidia.com",
        selector=T10,
        count=2,
        admin_access=True,
        capacity={"memory": "4Gi"},
        tolerations=[taint],
    ) == {
        "name": "shared",
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "selectors": [{"cel": {"expression": T10}}],
            "count": 2,
            "adminAccess": True,
            "capacity": {"requests": {"memory": "4Gi"}},
            "tolerations": [taint],
        },
    }


def test_a_claim_without_requests_asks_for_one_gpu_and_keeps_optional_fields_out() -> None:
    assert resource_claim("any") == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "any"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }


def test_a_claim_with_requests_constraints_config_and_annotations() -> None:
    same_product = {"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/productName"}
    sliced = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS"},
    }
    claim = resource_claim(
        "pair",
        device_request("a", selector=T10),
        device_request("b"),
        constraints=[same_product],
        config=[opaque_config(sliced, requests=["a"])],
        annotations={"fakeplugin.dev/prepare-delay": "2s"},
    )
    assert claim["metadata"] == {"name": "pair", "annotations": {"fakeplugin.dev/prepare-delay": "2s"}}
    assert claim["spec"]["devices"] == {
        "requests": [device_request("a", selector=T10), device_request("b")],
        "constraints": [same_product],
        "config": [{"requests": ["a"], "opaque": {"driver": "gpu.nvidia.com", "parameters": sliced}}],
    }


def test_an_opaque_config_for_all_requests_names_none() -> None:
    assert opaque_config({"kind": "X"}, driver="net.example.com") == {
        "opaque": {"driver": "net.example.com", "parameters": {"kind": "X"}}
    }


def test_a_template_holds_the_claims_spec_and_their_annotations() -> None:
    request = device_request(selector=T10)
    assert resource_claim_template("t10", request) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t10"},
        "spec": {"spec": resource_claim("t10", request)["spec"]},
    }
    annotated = resource_claim_template("t", annotations={"fakeplugin.dev/prepare-error": "boom"})
    assert annotated["spec"]["metadata"] == {"annotations": {"fakeplugin.dev/prepare-error": "boom"}}
    assert annotated["metadata"] == {"name": "t"}


def test_the_usual_claim_pod() -> None:
    assert claim_pod("p", {"resourceClaimTemplateName": "t"}, ["a", "b"]) == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            "containers": [
                {
                    "name": c,
                    "image": "ubuntu:22.04",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
                for c in ("a", "b")
            ],
        },
    }


def test_containers_use_whole_entries_or_one_request_and_take_any_other_field() -> None:
    assert container("split", claims=["first", ("second", "gpu-b")], image="busybox", command=None) == {
        "name": "split",
        "image": "busybox",
        "resources": {"claims": [{"name": "first"}, {"name": "second", "request": "gpu-b"}]},
    }
    legacy = container(claims=[], resources={"limits": {"nvidia.com/gpu": "1"}}, imagePullPolicy="Never")
    assert legacy == {
        "name": "ctr",
        "image": "ubuntu:22.04",
        "command": ["sleep", "infinity"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
        "imagePullPolicy": "Never",
    }


def test_a_pod_without_claims_or_restart_policy_and_with_more_spec() -> None:
    plain = pod("plain", [container(claims=[])], restart_policy=None, grace_period_s=5, nodeName="n1")
    assert plain["spec"] == {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "ctr", "image": "ubuntu:22.04", "command": ["sleep", "infinity"]}],
        "nodeName": "n1",
    }
    two = pod(
        "two",
        [container(claims=["a", "b"])],
        claims={"a": {"resourceClaimName": "x"}, "b": {"resourceClaimName": "y"}},
    )
    assert two["spec"]["resourceClaims"] == [
        {"name": "a", "resourceClaimName": "x"},
        {"name": "b", "resourceClaimName": "y"},
    ]


def test_built_objects_apply_as_one_list() -> None:
    objects = as_objects([resource_claim("c"), claim_pod("p", {"resourceClaimName": "c"})])
    assert [object_ref(o) for o in objects] == [("ResourceClaim", "c"), ("Pod", "p")]


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
