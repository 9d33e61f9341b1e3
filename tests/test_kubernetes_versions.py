"""The Kubernetes version table (fakeplugin.cluster.versions) and what reads it: the build script's
pins, the binaries' cache per version, the API server's DeviceTaintRule API, the CLI's version flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fakeplugin.cluster import Cluster, binaries, components, versions
from fakeplugin.cluster.layout import StateLayout
from tests.harness import docblocks

REPO = Path(__file__).resolve().parents[1]
MATRIX = ("v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2", "v1.38.0-beta.0")


def test_every_minor_from_1_34_to_1_38_has_a_row_and_the_default_is_the_newest_release() -> None:
    assert [versions.minor_of(v) for v in MATRIX] == ["1.34", "1.35", "1.36", "1.37", "1.38"]
    assert [r.newest for r in versions.RELEASES.values()] == list(MATRIX)
    # The newest minor with a release, not 1.38's pre-release; the seed lab's line one flag away.
    assert versions.DEFAULT_VERSION == "v1.37.2" == versions.newest_released() == binaries.K8S_VERSION
    assert versions.SEED_VERSION == "v1.35.4"
    assert versions.release("v1.37.0") is versions.RELEASES["1.37"]  # any patch of a supported minor
    # Pre-release tags name their minor too (1.38 is served as v1.38.0-beta.0 only).
    assert versions.release("v1.38.0-rc.1") is versions.RELEASES["1.38"]
    assert versions.server_version("v1.38.0-beta.0") == (1, 38)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("v1.33.1", r"minor 1\.33 is not supported; supported minors: 1\.34 \(e\.g\. v1\.34\.4\)"),
        ("1.35.4", r"expected vMAJOR\.MINOR\.PATCH\[-beta\.N\], e\.g\. v1\.37\.2"),
        ("v1.38", r"expected vMAJOR\.MINOR\.PATCH"),
        ("v1.38.0-beta", r"expected vMAJOR\.MINOR\.PATCH"),
        ("v1.39.0-alpha.0", r"minor 1\.39 is not supported; supported minors: .*, 1\.38 \(e\.g\. v1\.38"),
    ],
)
def test_unsupported_versions_are_refused_with_the_supported_ones(version: str, message: str) -> None:
    with pytest.raises(versions.UnsupportedVersion, match=message):
        versions.release(version)
    with pytest.raises(versions.UnsupportedVersion, match=message):
        versions.selected({versions.ENV: version})


def test_gates_turned_on_are_the_alpha_dra_gates_before_1_36_and_list_attributes_after() -> None:
    alpha = {
        "DRAPartitionableDevices",
        "DRAExtendedResource",
        "DRADeviceTaints",
        "ResourceHealthStatus",
        "DRAConsumableCapacity",
    }
    assert set(versions.release("v1.34.4").feature_gates) == alpha
    assert set(versions.release("v1.35.4").feature_gates) == alpha
    # Beta (on by default) in 1.36; DRAExtendedResource GA and locked in 1.37: never passed there.
    # DRAListTypeAttributes is new in 1.36, alpha: on, so NVIDIA's 0.5.0-dev may publish numaNode as a list.
    assert dict(versions.release("v1.36.3").feature_gates) == {"DRAListTypeAttributes": True}
    # 1.37: the Workload API with gangs, claims for pod groups, topology-aware placement (beta, beta, alpha;
    # all off by default there).
    workloads = {
        "DRAListTypeAttributes": True,
        "GenericWorkload": True,
        "DRAWorkloadResourceClaims": True,
        "TopologyAwareWorkloadScheduling": True,
    }
    assert dict(versions.release("v1.37.2").feature_gates) == workloads
    # 1.38: DRAPartitionableDevices, DRADeviceBindingConditions, DRADeviceTaints, DRADeviceTaintRules GA and
    # locked, DRAConsumableCapacity GA; a locked gate set to its default is accepted, but none is set.
    assert dict(versions.release("v1.38.0-beta.0").feature_gates) == workloads
    assert dict(versions.release("v1.37.2").feature_gates) == components.DEFAULT_FEATURE_GATES


@pytest.mark.parametrize(
    ("version", "gates", "runtime_config"),
    [
        ("v1.34.4", None, "--runtime-config=resource.k8s.io/v1alpha3=true"),  # DRADeviceTaints serves it
        ("v1.35.4", None, None),
        ("v1.35.4", {"DRADeviceTaintRules": True}, "--runtime-config=resource.k8s.io/v1alpha3=true"),
        ("v1.36.3", None, None),
        ("v1.36.3", {"DRADeviceTaintRules": True}, "--runtime-config=resource.k8s.io/v1beta2=true"),
        # GA: resource.k8s.io/v1 serves DeviceTaintRule by default; the Workload API is beta, off by default.
        ("v1.37.2", None, "--runtime-config=scheduling.k8s.io/v1beta1=true"),
        ("v1.37.2", {"GenericWorkload": False}, None),
        ("v1.38.0-beta.0", None, "--runtime-config=scheduling.k8s.io/v1beta1=true"),
        # Asked for on 1.35 and 1.36: their alpha APIs, beside DeviceTaintRule's.
        (
            "v1.35.4",
            {"DRADeviceTaintRules": True, "GenericWorkload": True},
            "--runtime-config=resource.k8s.io/v1alpha3=true,scheduling.k8s.io/v1alpha1=true",
        ),
        ("v1.36.3", {"GenericWorkload": True}, "--runtime-config=scheduling.k8s.io/v1alpha2=true"),
    ],
)
def test_apis_off_by_default_are_switched_on_for_the_gates_that_need_them(
    tmp_path: Path, version: str, gates: dict[str, bool] | None, runtime_config: str | None
) -> None:
    k8s = versions.release(version)
    all_gates = {**k8s.feature_gates, **(gates or {})}
    argv = components.apiserver_argv(
        Path("/x"), StateLayout(tmp_path), components.Ports(1, 2, 3, 4, 5), all_gates, k8s
    )
    assert [a for a in argv if a.startswith("--runtime-config")] == (
        [runtime_config] if runtime_config else []
    )
    # 1.37 and 1.38 refuse a loopback --advertise-address with the default (lease) endpoint reconciler.
    reconciler = ["--endpoint-reconciler-type=none"] if version in ("v1.37.2", "v1.38.0-beta.0") else []
    assert [a for a in argv if a.startswith("--endpoint-reconciler-type")] == reconciler
    gates_flag = next(a for a in argv if a.startswith("--feature-gates="))
    assert gates_flag == f"--feature-gates={components.gates_flag(all_gates)}"


@pytest.mark.parametrize(
    ("version", "gates", "message"),
    [
        (
            "v1.35.4",
            {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True},
            r"TopologyAwareWorkloadScheduling=true \(KEP-5732\): Kubernetes v1\.35\.4 has no such gate; "
            r"it is in 1\.36, 1\.37, 1\.38 \(on by default from 1\.37: --kubernetes-version v1\.37\.2\)",
        ),
        (
            "v1.34.4",
            {"GenericWorkload": True},
            r"GenericWorkload=true \(KEP-4671\): Kubernetes v1\.34\.4 has no",
        ),
        ("v1.35.4", {"DRAWorkloadResourceClaims": True}, r"DRAWorkloadResourceClaims=true \(KEP-5729\)"),
        (
            "v1.37.2",
            {
                "GenericWorkload": False,
                "DRAWorkloadResourceClaims": True,
                "TopologyAwareWorkloadScheduling": True,
            },
            r"DRAWorkloadResourceClaims, TopologyAwareWorkloadScheduling need GenericWorkload=true",
        ),
    ],
)
def test_workload_gates_asked_for_where_the_minor_cannot_are_refused_before_anything_starts(
    tmp_path: Path, version: str, gates: dict[str, bool], message: str
) -> None:
    with pytest.raises(versions.UnsupportedVersion, match=message):
        versions.check_workload_gates(version, gates)
    with pytest.raises(versions.UnsupportedVersion, match=message):
        Cluster.up(
            tmp_path / "no-inventory.yaml",
            tmp_path / "state",
            kubernetes_version=version,
            feature_gates=gates,
        )


@pytest.mark.parametrize("version", ["v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2", "v1.38.0-beta.0"])
def test_every_minor_s_own_gates_pass_the_workload_check(version: str) -> None:
    versions.check_workload_gates(version, versions.release(version).feature_gates)
    # Off is never refused, even where the gate does not exist.
    versions.check_workload_gates(version, dict.fromkeys(versions.WORKLOAD_GATES, False))


def test_the_kind_settings_of_the_docs_are_the_gates_and_api_cluster_up_turns_on() -> None:
    """docs/kind.md's cluster-config fragment (*Gangs and the Workload API*) for the default version."""
    (fragment,) = [
        b.text for b in docblocks.blocks() if b.page == "docs/kind.md" and b.first == "featureGates:"
    ]
    k8s = versions.release(versions.DEFAULT_VERSION)
    assert yaml.safe_load(fragment) == {
        "featureGates": {g: k8s.feature_gates[g] for g in versions.WORKLOAD_GATES},
        "runtimeConfig": {api: "true" for api in k8s.runtime_config(k8s.feature_gates)},
    }


def test_build_script_takes_etcd_helm_go_kueue_keda_karpenter_and_actionlint_from_the_table() -> None:
    table = REPO / "fakeplugin" / "cluster" / "versions.py"
    for version in MATRIX:
        out = subprocess.run(
            [sys.executable, str(table), "pins", version], capture_output=True, text=True, check=True
        ).stdout
        k8s = versions.release(version)
        assert out.splitlines() == [
            f"K8S_VERSION={version}",
            f"ETCD_VERSION={k8s.etcd}",
            f"HELM_VERSION={k8s.helm}",
            f"GO_MIN={k8s.go}",
            f"GO_TOOLCHAIN={versions.GO_TOOLCHAIN}",  # the same for every minor
            f"KUEUE_VERSION={versions.KUEUE_VERSION}",  # the same for every minor
            f"KEDA_VERSION={versions.KEDA_VERSION}",  # likewise
            f"KARPENTER_VERSION={versions.KARPENTER_VERSION}",  # likewise
            f"ACTIONLINT_VERSION={versions.ACTIONLINT_VERSION}",  # likewise
        ]
    default = subprocess.run([sys.executable, str(table), "pins", ""], capture_output=True, text=True)
    assert default.stdout.splitlines()[0] == "K8S_VERSION=v1.37.2"
    refused = subprocess.run(
        ["bash", str(REPO / "hack" / "build-k8s.sh")],
        env={"PATH": "/usr/bin:/bin", "K8S_VERSION": "v1.33.0", "HOME": "/nonexistent"},
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert "minor 1.33 is not supported" in refused.stderr


@pytest.mark.build
def test_a_minor_newer_than_the_installed_go_builds_with_the_approved_toolchain_or_says_why_not(
    tmp_path: Path,
) -> None:
    # 1.38's go.mod says go 1.27.0, newer than this machine's go1.26.8: the script names a toolchain in
    # GOTOOLCHAIN for every go command, as for Karpenter; one the proxy does not serve stops it at once.
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "build-k8s.sh"), "--only", "etcd"],
        env={
            **os.environ,
            "FAKEPLUGIN_CACHE": str(tmp_path),
            "K8S_VERSION": "v1.38.0-beta.0",
            "K8S_GOTOOLCHAIN": "go1.99.99",
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    assert "go1.26.8 is older than Go 1.27: fetching Go toolchain go1.99.99 (module proxy)" in out.stderr
    assert (
        "error: Kubernetes v1.38.0-beta.0 needs Go >= 1.27; the go command could not fetch go1.99.99 "
        "(set K8S_GOTOOLCHAIN to one the Go module proxy serves): " in out.stderr
    )
    assert not (tmp_path / "k8s" / "v1.38.0-beta.0" / "bin" / "etcd").exists()


def test_binaries_are_cached_per_version(tmp_path: Path) -> None:
    env = {"FAKEPLUGIN_CACHE": str(tmp_path)}
    assert binaries.cache_dir(env) == tmp_path / "k8s" / "v1.37.2" / "bin"
    assert binaries.cache_dir({**env, versions.ENV: "v1.35.4"}) == tmp_path / "k8s" / "v1.35.4" / "bin"
    assert binaries.cache_dir(env, "v1.34.4") == tmp_path / "k8s" / "v1.34.4" / "bin"
    with pytest.raises(
        binaries.BinaryNotFound,
        match=r"fakeplugin cluster build --kubernetes-version v1\.36\.3 --only kubelet`",
    ):
        binaries.find("kubelet", env, "v1.36.3")


def test_cli_version_flag_refuses_an_unsupported_version_before_building() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "fakeplugin", "cluster", "build", "--kubernetes-version", "v1.30.0"],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0
    assert "minor 1.30 is not supported" in run.stderr
    assert "[build-k8s" not in run.stderr  # refused before the script ran


def test_render_lays_dynamic_mig_out_for_the_api_servers_version() -> None:
    def kinds(version: str) -> list[list[str]]:
        out = subprocess.run(
            [sys.executable, "-m", "fakeplugin", "render", "--inventory", str(REPO / "examples" / "mig.yaml"),
             "--node", "h200-dynamic", "--feature-gates", "DynamicMIG=true", "--kubernetes-version", version],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        docs = [d for d in yaml.safe_load_all(out) if d["kind"] == "ResourceSlice"]
        return [sorted(k for k in ("sharedCounters", "devices") if k in d["spec"]) for d in docs]

    assert versions.server_version("v1.34.4") == (1, 34)
    # 1.34: each GPU's slice holds its counter set and its devices; 1.35+: counters in a slice of their own.
    assert kinds("v1.34.4") == [["devices", "sharedCounters"]] * 2
    assert kinds("v1.35.4") == kinds("v1.38.0-beta.0") == [["sharedCounters"], ["devices"], ["devices"]]
