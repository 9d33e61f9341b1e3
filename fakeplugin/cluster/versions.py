"""The Kubernetes versions the local cluster runs (1.34 → 1.38): one row of data per minor.

Everything that differs between minors lives here and nowhere else: the etcd and helm built with it,
the Go it needs, the feature gates `cluster up` turns on, where DeviceTaintRule is served, the
kubelet's health API. Code asks `release(version)` and never compares version numbers itself.

Sources, all at the tag of the row's newest patch (kubernetes/kubernetes, read from the module the
Go module proxy serves for `k8s.io/kubernetes@vX.Y.Z`; 1.38: v1.38.0-beta.0, the only 1.38 tag it serves):
- gates: `pkg/features/kube_features.go` (versioned specs: alpha/beta/GA, default, locked);
  DRAListTypeAttributes: alpha since 1.36, off by default there, in 1.37 and in 1.38; 1.38 locks
  DRAPartitionableDevices, DRADeviceBindingConditions, DRADeviceTaints and DRADeviceTaintRules on, makes
  DRAConsumableCapacity GA (not locked) and removes DynamicResourceAllocation;
- etcd: `build/dependencies.yaml` (`name: "etcd"`) and `hack/lib/etcd.sh`: 3.6.5 (1.34), 3.6.6 (1.35),
  3.6.8 (1.36), 3.7.0 (1.37), 3.7.1 (1.38); we build the newest patch of that etcd minor the proxy serves
  (`etcd`), and download the release Kubernetes pins (`etcd_release`: kubeadm's DefaultEtcdVersion in
  `cmd/kubeadm/app/constants/constants.go` at each tag, the same numbers; fakeplugin/cluster/downloads.py);
- Go: the `go` line of `k8s.io/kubernetes`'s go.mod: 1.24.0 (1.34), 1.25.0 (1.35), 1.26.0 (1.36, 1.37),
  1.27.0 (1.38: newer than the machine's Go, so built with GO_TOOLCHAIN);
- DeviceTaintRule: `pkg/registry/resource/rest/storage_resource.go` (v1alpha3 in 1.34/1.35, v1beta2 from
  1.36, v1 from 1.37) and `pkg/controlplane/instance.go` (v1beta2 and v1alpha3 are off by default);
- health API: `pkg/kubelet/cm/dra/plugin/dra_plugin.go` (`healthServicesSupportedByKubelet`: v1 and
  v1alpha1 from 1.37, v1alpha1 alone before);
- kubelet config: every field we set (`failCgroupV1` included, since 1.31) exists in all five minors
  (`pkg/kubelet/apis/config/types.go`), so the KubeletConfiguration is the same for all;
- the API server serves `resource.k8s.io/v1` by default in all five (`pkg/controlplane/instance.go`);
- workloads (WORKLOAD_GATES): the gates in `pkg/features/kube_features.go`, the API version serving Workload
  and PodGroup in `pkg/registry/scheduling/rest/storage_scheduling.go` (v1alpha1, Workload alone, in 1.35;
  v1alpha2 in 1.36; v1beta1 and v1alpha3 in 1.37, off by default as every beta API since 1.24), the types
  in `staging/src/k8s.io/api/scheduling/` and `core/v1` (pods join a PodGroup by
  `spec.schedulingGroup.podGroupName` from 1.36); the scheduler's default profile adds GangScheduling, and
  TopologyPlacementGenerator with PodGroupPodsCount, when their gates are on
  (`pkg/scheduler/apis/config/v1/default_plugins.go`), so its configuration needs nothing more. 1.36 read at
  v1.36.0; in 1.38 TopologyAwareWorkloadScheduling is beta (off by default), the rest as in 1.37;
- helm: helm.sh/docs/topics/version_skew (a helm release supports the Kubernetes minor of its client-go
  and the three before: 3.19 → 1.31-1.34, 3.22 → 1.34-1.37). 1.35 keeps the seed's 3.19.0 (built and
  proven with it; 1.35 is one past its range, which the chart test shows harmless); 1.36 shares 1.37's;
  1.38 keeps 3.22.0, one past its range as 1.35: no helm the proxy serves requires client-go 0.38
  (helm.sh/helm/v3 v3.22.0 and helm.sh/helm/v4 v4.3.2, the newest, both require v0.37).

Stdlib only, and run by the scripts so no version is written twice: hack/build-k8s.sh takes the etcd, helm
and Go it must use (`python3 versions.py pins vX.Y.Z`), hack/kind/lib.sh the default (`default`),
hack/matrix.sh its versions (`matrix`: the newest patch of every minor), .ci/run its second version
(`seed`: the seed lab's line). `newest` is the newest minor with a release, so a pre-release row such as
1.38's stays out of the default.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

# The default: the newest patch of the newest minor with a release (newest_released(), asserted in the
# tests). The seed lab's line (it ran v1.35.3) stays one flag away: --kubernetes-version v1.35.4.
DEFAULT_VERSION = "v1.37.2"
SEED_VERSION = "v1.35.4"
ENV = "FAKEPLUGIN_K8S_VERSION"  # selects the version for `cluster up/build`, `demo`, the pytest plugin

# Kueue (`cluster up --with kueue`), the same for every minor: the newest release the Go module proxy
# served when checked. Its DRA quota (KueueDRAIntegration, counters for partitionable devices) is beta and
# on from v0.19; our manifests handling reads the layout of its module at v0.19 (docs/kueue.md).
KUEUE_VERSION = "v0.19.2"
KUEUE_MINOR = "0.19"
KUEUE_ENV = "FAKEPLUGIN_KUEUE_VERSION"

# KEDA (the GPU-utilisation autoscaling test, docs/hpa.md): the newest release whose go.mod the machine's
# Go builds. v2.21.0 and v2.21.1 need go >= 1.27.4; v2.20.2 says go 1.26.0.
KEDA_VERSION = "v2.20.2"

# The one Go toolchain newer than the machine's (go1.26.8) approved here: hack/build-k8s.sh sets
# GOTOOLCHAIN to it for what needs a newer Go (Karpenter; Kubernetes 1.38, whose go.mod says go 1.27.0),
# and the go command fetches it from the module proxy like a module.
GO_TOOLCHAIN = "go1.27.3"

# Karpenter (`cluster up --with karpenter`, docs/karpenter.md): the kwok provider of the newest release the
# Go module proxy served when checked. Its go.mod says go 1.26.9, newer than the machine's 1.26.8, so
# hack/build-k8s.sh builds it with GOTOOLCHAIN=GO_TOOLCHAIN.
KARPENTER_VERSION = "v1.15.0"

# actionlint (github.com/rhysd/actionlint), the GitHub Actions linter of the build tier: it lints
# .github/workflows and docs/ci.md's workflow (tests/test_workflows.py); `hack/build-k8s.sh --only
# actionlint` builds it.
ACTIONLINT_VERSION = "v1.7.12"


@dataclass(frozen=True)
class KubernetesRelease:
    """What one Kubernetes minor needs from us."""

    minor: str  # "1.37"
    newest: str  # the newest patch the Go module proxy served when this row was checked
    go: str  # the `go` line of k8s.io/kubernetes's go.mod: the oldest Go that builds it
    etcd: str  # what hack/build-k8s.sh builds: the newest patch of the etcd minor Kubernetes pins
    # The etcd this Kubernetes release pins (kubeadm's DefaultEtcdVersion, cmd/kubeadm/app/constants/
    # constants.go at the row's tag): the official release downloaded instead of a build (downloads.py).
    etcd_release: str
    helm: str
    # Gates `cluster up` turns on in every component: the DRA features NVIDIA's driver uses that are
    # off by default in this minor. Beta-on and GA gates are left out (GA ones may be locked or removed).
    feature_gates: Mapping[str, bool]
    # DeviceTaintRule (a cluster-scoped taint for devices): the gate that serves it and its API version;
    # `runtime_config` when that API version is off by default and has to be switched on.
    taint_rule_gate: str
    taint_rule_api: str
    taint_rule_runtime_config: bool
    # DRAResourceHealth services the kubelet accepts, newest first (it takes the first the plugin lists).
    health_services: tuple[str, ...] = ("v1alpha1.DRAResourceHealth",)
    # Extra kube-apiserver flags this minor needs for a loopback-only control plane.
    apiserver_args: tuple[str, ...] = ()
    # Which claims the kubelet reports device health for in a container's allocatedResourcesStatus (gate
    # ResourceHealthStatus): "template" — claims generated from a ResourceClaimTemplate, found through
    # pod.status.resourceClaimStatuses (kubernetes PR #134875, 1.35); "named" — before that fix the kubelet
    # looked claims up by the pod's own entry name, so only a claim named exactly as that entry (kubernetes
    # issue #134482; pkg/kubelet/cm/dra/manager.go UpdateAllocatedResourcesStatus at each tag).
    health_status_claims: str = "template"
    # The workload gates (WORKLOAD_GATES) this minor has, and the scheduling.k8s.io version that serves
    # Workload and PodGroup when GenericWorkload is on (off by default: `--runtime-config`); "" where none.
    workload_gates: frozenset[str] = frozenset()
    workload_api: str = ""

    def runtime_config(self, gates: Mapping[str, bool]) -> list[str]:
        """The API versions off by default in this minor that `gates` need served."""
        apis = []
        if self.taint_rule_runtime_config and gates.get(self.taint_rule_gate):
            apis.append(self.taint_rule_api)  # DeviceTaintRule's
        if self.workload_api and gates.get(GENERIC_WORKLOAD):
            apis.append(self.workload_api)  # Workload and PodGroup
        return apis


_ALPHA_DRA = MappingProxyType(
    {
        "DRAPartitionableDevices": True,  # DynamicMIG: consumesCounters / sharedCounters
        "DRAExtendedResource": True,  # the chart's DeviceClass extendedResourceName: nvidia.com/gpu
        "DRADeviceTaints": True,  # the driver's health taints on devices
        "ResourceHealthStatus": True,  # the kubelet asks the health service, pods show it
        # Consumable shares (driver 0.5.0-dev): without it the API server drops allowMultipleAllocations and
        # requestPolicy from slices and the scheduler never shares a device. Alpha since 1.34, beta from 1.36.
        "DRAConsumableCapacity": True,
    }
)

# DRAListTypeAttributes (alpha, off by default in 1.36 and 1.37; absent before): the API server keeps
# list-valued device attributes (`ints`, `strings`, ...) and CEL gets `includes()`. NVIDIA's driver at main
# (release 0.5.0-dev) publishes numaNode as `{"ints": [n]}` with its own gate of the same name, which needs
# this one (pkg/featuregates/featuregates.go); without it the API server drops the list
# (pkg/registry/resource/resourceslice/strategy.go dropDisableDRAListTypeAttributesFields) and the device
# fails validation for an attribute without a value.
_LIST_ATTRIBUTES = MappingProxyType({"DRAListTypeAttributes": True})

# Rack-scale jobs as Kubernetes schedules them (docs/rack-scale-jobs.md), gate → KEP: the Workload API and
# gang scheduling (alpha in 1.35, beta and off by default in 1.37), ResourceClaims for a whole PodGroup and
# topology-aware workload scheduling (both alpha in 1.36; the first beta and off by default in 1.37, the
# second alpha until its beta, off by default, in 1.38). Both need GenericWorkload (the gates' dependencies
# in kube_features.go). On by default from 1.37, where the API is beta; on 1.35 and 1.36 (alpha, other API
# versions) when asked for.
GENERIC_WORKLOAD = "GenericWorkload"
WORKLOAD_GATES: Mapping[str, str] = MappingProxyType(
    {
        GENERIC_WORKLOAD: "KEP-4671",
        "DRAWorkloadResourceClaims": "KEP-5729",
        "TopologyAwareWorkloadScheduling": "KEP-5732",
    }
)
_WORKLOADS = MappingProxyType({**_LIST_ATTRIBUTES, **dict.fromkeys(WORKLOAD_GATES, True)})

RELEASES: Mapping[str, KubernetesRelease] = MappingProxyType(
    {
        r.minor: r
        for r in (
            KubernetesRelease(
                minor="1.34",
                newest="v1.34.4",
                go="1.24",
                etcd="v3.6.16",
                etcd_release="v3.6.5",  # DefaultEtcdVersion at v1.34.4
                helm="v3.19.0",
                feature_gates=_ALPHA_DRA,
                # No DRADeviceTaintRules gate yet: DRADeviceTaints serves DeviceTaintRule (v1alpha3).
                taint_rule_gate="DRADeviceTaints",
                taint_rule_api="resource.k8s.io/v1alpha3",
                taint_rule_runtime_config=True,
                health_status_claims="named",
            ),
            KubernetesRelease(
                minor="1.35",
                newest="v1.35.4",
                go="1.25",
                etcd="v3.6.16",
                etcd_release="v3.6.6",  # DefaultEtcdVersion at v1.35.4
                helm="v3.19.0",
                feature_gates=_ALPHA_DRA,
                taint_rule_gate="DRADeviceTaintRules",  # alpha, new in 1.35
                taint_rule_api="resource.k8s.io/v1alpha3",
                taint_rule_runtime_config=True,
                workload_gates=frozenset({GENERIC_WORKLOAD}),  # alpha; a Workload, no PodGroup yet
                workload_api="scheduling.k8s.io/v1alpha1",
            ),
            KubernetesRelease(
                minor="1.36",
                newest="v1.36.3",
                go="1.26",
                etcd="v3.6.16",
                etcd_release="v3.6.8",  # DefaultEtcdVersion at v1.36.3
                helm="v3.22.0",  # as 1.37: one helm build less; its n-3 range (1.34-1.37) covers 1.36
                # DRAPartitionableDevices, DRAExtendedResource, DRADeviceTaints, ResourceHealthStatus,
                # DRAConsumableCapacity: beta, on by default; DRAAdminAccess, DRAPrioritizedList: GA.
                feature_gates=_LIST_ATTRIBUTES,
                taint_rule_gate="DRADeviceTaintRules",  # beta, off by default
                taint_rule_api="resource.k8s.io/v1beta2",
                taint_rule_runtime_config=True,
                workload_gates=frozenset(WORKLOAD_GATES),  # alpha, all three: off unless asked for
                workload_api="scheduling.k8s.io/v1alpha2",
            ),
            KubernetesRelease(
                minor="1.37",
                newest="v1.37.2",
                go="1.26",
                etcd="v3.7.3",
                etcd_release="v3.7.0",  # DefaultEtcdVersion at v1.37.2
                helm="v3.22.0",
                # DRADeviceTaints, DRADeviceTaintRules: GA; DRAExtendedResource: GA and locked. The
                # workload gates: beta (off by default) but TopologyAwareWorkloadScheduling, alpha.
                feature_gates=_WORKLOADS,
                taint_rule_gate="DRADeviceTaintRules",
                taint_rule_api="resource.k8s.io/v1",
                taint_rule_runtime_config=False,
                health_services=("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"),
                # 1.37's endpoint reconcilers refuse a loopback --advertise-address ("cannot use public
                # IP 127.0.0.1 with endpoint reconciler", pkg/controlplane/instance.go, ValidateIP in
                # pkg/controlplane/reconcilers/lease.go); `none` accepts it. Nothing of ours reaches the
                # API server through the `kubernetes` Service, so its endpoints may stay empty.
                apiserver_args=("--endpoint-reconciler-type=none",),
                workload_gates=frozenset(WORKLOAD_GATES),
                workload_api="scheduling.k8s.io/v1beta1",
            ),
            KubernetesRelease(
                minor="1.38",
                # No v1.38.0, rc or beta.1 served yet. Its kubelet imports sigs.k8s.io/iptables-wrappers
                # v1.0.0, whose source the proxy refuses (403): the build stops there for now
                # (docs/kubernetes-versions.md, "1.38").
                newest="v1.38.0-beta.0",
                go="1.27",  # newer than the machine's Go: built with GO_TOOLCHAIN
                etcd="v3.7.3",
                etcd_release="v3.7.1",  # DefaultEtcdVersion at v1.38.0-beta.0
                helm="v3.22.0",  # one past its range, as 1.35's: no helm with client-go 0.38 is served
                # DRAPartitionableDevices, DRADeviceBindingConditions, DRADeviceTaints, DRADeviceTaintRules:
                # GA and locked; DRAConsumableCapacity: GA; DynamicResourceAllocation: removed. The
                # workload gates: all three beta, off by default.
                feature_gates=_WORKLOADS,
                taint_rule_gate="DRADeviceTaintRules",
                taint_rule_api="resource.k8s.io/v1",
                taint_rule_runtime_config=False,
                health_services=("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"),
                apiserver_args=("--endpoint-reconciler-type=none",),  # as 1.37's, for the same check
                workload_gates=frozenset(WORKLOAD_GATES),
                workload_api="scheduling.k8s.io/v1beta1",
            ),
        )
    }
)

# A release or a pre-release tag (1.38 is only served as v1.38.0-beta.0 so far).
_VERSION = re.compile(r"^v1\.(\d+)\.(\d+)(-(alpha|beta|rc)\.\d+)?$")


class UnsupportedVersion(ValueError):
    pass


def minor_of(version: str) -> str:
    """`v1.37.2` → "1.37"; a clear error for anything that is not a served 1.34 to 1.38 version."""
    m = _VERSION.match(version)
    if not m:
        raise UnsupportedVersion(
            f"Kubernetes version {version!r}: expected vMAJOR.MINOR.PATCH[-beta.N], e.g. v1.37.2"
        )
    minor = f"1.{m.group(1)}"
    if minor not in RELEASES:
        raise UnsupportedVersion(
            f"Kubernetes version {version}: minor {minor} is not supported; supported minors: "
            + ", ".join(f"{r.minor} (e.g. {r.newest})" for r in RELEASES.values())
        )
    return minor


def release(version: str) -> KubernetesRelease:
    return RELEASES[minor_of(version)]


def check_workload_gates(version: str, gates: Mapping[str, bool]) -> None:
    """A clear error for a workload gate (WORKLOAD_GATES) turned on where `version`'s minor lacks it, or
    for DRAWorkloadResourceClaims or TopologyAwareWorkloadScheduling without GenericWorkload."""
    r = release(version)
    for gate, kep in WORKLOAD_GATES.items():
        if gates.get(gate) and gate not in r.workload_gates:
            having = [m.minor for m in RELEASES.values() if gate in m.workload_gates]
            raise UnsupportedVersion(
                f"--kubernetes-feature-gates: {gate}=true ({kep}): Kubernetes {version} has no such gate; "
                f"it is in {', '.join(having)} "
                f"(on by default from 1.37: --kubernetes-version {DEFAULT_VERSION})"
            )
    lacking = [g for g in WORKLOAD_GATES if g != GENERIC_WORKLOAD and gates.get(g)]
    if lacking and not gates.get(GENERIC_WORKLOAD):
        raise UnsupportedVersion(
            f"--kubernetes-feature-gates: {', '.join(lacking)} need{'s' if len(lacking) == 1 else ''} "
            f"{GENERIC_WORKLOAD}=true (the Workload API)"
        )


def selected(env: Mapping[str, str] = os.environ) -> str:
    """The version asked for in the environment ($FAKEPLUGIN_K8S_VERSION), else the default; checked."""
    version = env.get(ENV) or DEFAULT_VERSION
    minor_of(version)
    return version


def server_version(version: str) -> tuple[int, int]:
    """`v1.34.4` → (1, 34): what an API server of `version` reports as major and minor in /version."""
    major, minor = minor_of(version).split(".")
    return int(major), int(minor)


def matrix() -> list[str]:
    """The newest patch of every supported minor, oldest first (hack/matrix.sh's default cells)."""
    return [r.newest for r in RELEASES.values()]


def newest_released() -> str:
    """The newest patch of the newest minor with a release, not a pre-release (what DEFAULT_VERSION is)."""
    return [v for v in matrix() if "-" not in v][-1]


def build_pins(version: str) -> dict[str, str]:
    """The environment hack/build-k8s.sh builds `version` (empty: the default) with."""
    version = version or DEFAULT_VERSION
    r = release(version)
    return {
        "K8S_VERSION": version,
        "ETCD_VERSION": r.etcd,
        "HELM_VERSION": r.helm,
        "GO_MIN": r.go,
        "GO_TOOLCHAIN": GO_TOOLCHAIN,
        "KUEUE_VERSION": KUEUE_VERSION,
        "KEDA_VERSION": KEDA_VERSION,
        "KARPENTER_VERSION": KARPENTER_VERSION,
        "ACTIONLINT_VERSION": ACTIONLINT_VERSION,
    }


_KUEUE_VERSION = re.compile(r"^v0\.(\d+)\.(\d+)$")


def kueue_version(version: str | None = None, env: Mapping[str, str] = os.environ) -> str:
    """`version`, else $FAKEPLUGIN_KUEUE_VERSION, else KUEUE_VERSION; a clear error unless a v0.19.x."""
    chosen = version or env.get(KUEUE_ENV) or KUEUE_VERSION
    m = _KUEUE_VERSION.match(chosen)
    if not m or f"0.{m.group(1)}" != KUEUE_MINOR:
        raise UnsupportedVersion(
            f"Kueue version {chosen!r}: supported are v{KUEUE_MINOR}.x releases (e.g. {KUEUE_VERSION}, the "
            "default): DRA quota with counters needs v0.19, and the manifests are read as v0.19 lays them out"
        )
    return chosen


_LISTS = {
    "default": lambda: [DEFAULT_VERSION],
    "seed": lambda: [SEED_VERSION],
    "matrix": matrix,
    "newest": lambda: [newest_released()],
}

if __name__ == "__main__":  # for the scripts: see the module docstring
    args = sys.argv[1:]
    if len(args) == 1 and args[0] in _LISTS:
        print("\n".join(_LISTS[args[0]]()))
        sys.exit(0)
    if len(args) != 2 or args[0] != "pins":
        sys.exit(f"usage: {sys.argv[0]} pins vX.Y.Z | {' | '.join(_LISTS)}")
    try:
        pins = build_pins(args[1])
    except UnsupportedVersion as exc:
        sys.exit(str(exc))
    print("\n".join(f"{k}={v}" for k, v in pins.items()))
