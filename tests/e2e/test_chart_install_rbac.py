"""End-to-end: the chart's least privilege, on a real authorizer.

1. The session cluster runs AlwaysAllow, so a private etcd + kube-apiserver with RBAC (static admin token)
   runs here (tests/harness/chart_install.py). As the plugin's ServiceAccount (impersonated),
   SubjectAccessReviews allow exactly the plugin's calls, and the ValidatingAdmissionPolicy lets it write
   ResourceSlices of its own node only — the node named by the `authentication.kubernetes.io/node-name`
   user extra, which the API server puts only into pod-bound tokens; impersonation sets it here.
2. On the same server, the chart with resources.computeDomains.enabled in a second namespace, and with
   .bindingConditions too in a third: each ComputeDomain component's ServiceAccount may make exactly the
   calls of tests/harness/rbac.py's tables (CONTROLLER_CALLS, plus CONTROLLER_BINDING_CONDITIONS_CALLS
   with binding conditions; KUBELET_PLUGIN_CALLS, DAEMON_CALLS), SubjectAccessReviews in one kubectl call
   each; and fleet mode's ServiceAccount exactly FLEET_CALLS.

The chart's objects against the session cluster are tests/e2e/test_chart_install.py's.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import yaml

from tests.harness.chart_install import ApiServer, as_list, render, running_rbac_apiserver
from tests.harness.kube import wait_for

pytestmark = pytest.mark.cluster

NODE_EXTRA = "authentication.kubernetes.io/node-name"


@pytest.fixture(scope="module")
def rbac_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_rbac_apiserver(tmp_path_factory.mktemp("rbac-apiserver")) as server:
        yield server


@dataclass(frozen=True)
class Installed:
    server: ApiServer
    namespace: str
    service_account: str
    driver: str

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@pytest.fixture(scope="module")
def installed(rbac_apiserver: ApiServer) -> Installed:
    namespace, driver = "nvidia-dra-driver-gpu", "gpu.nvidia.com"
    objs = render(namespace, "fakeplugin", driver)
    created = rbac_apiserver.kubectl("create", "namespace", namespace)
    assert created.returncode == 0, created.stderr
    applied = rbac_apiserver.kubectl("apply", "-f", "-", input=as_list(objs))
    assert applied.returncode == 0, applied.stderr
    [sa] = [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]
    return Installed(rbac_apiserver, namespace, sa, driver)


def allowed(
    installed: Installed, verb: str, resource: str, group: str = "", namespace: str = "", name: str = ""
) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": installed.user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{installed.namespace}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "verb": verb,
                "resource": resource,
                "group": group,
                "namespace": namespace,
                "name": name,
            },
        },
    }
    result = installed.server.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review))
    assert result.returncode == 0, result.stderr
    return bool(json.loads(result.stdout)["status"].get("allowed"))


NEEDED = [
    ("get", "nodes", "", "", "node-a"),
    ("watch", "nodes", "", "", "node-a"),
    *[
        (verb, "resourceslices", "resource.k8s.io", "", "")
        for verb in ("get", "list", "watch", "create", "update", "delete")
    ],
    ("get", "resourceclaims", "resource.k8s.io", "default", "claim-1"),
    ("get", "resourceclaims", "resource.k8s.io", "team-b", "claim-2"),
]
NOT_NEEDED = [
    ("list", "nodes", "", "", ""),
    ("update", "nodes", "", "", "node-a"),
    ("patch", "nodes", "", "", "node-a"),
    ("get", "secrets", "", "nvidia-dra-driver-gpu", ""),
    ("list", "secrets", "", "default", ""),
    ("get", "pods", "", "default", ""),
    ("create", "pods", "", "default", ""),
    ("get", "configmaps", "", "nvidia-dra-driver-gpu", ""),
    ("patch", "resourceslices", "resource.k8s.io", "", ""),
    ("deletecollection", "resourceslices", "resource.k8s.io", "", ""),
    ("list", "resourceclaims", "resource.k8s.io", "default", ""),
    ("watch", "resourceclaims", "resource.k8s.io", "default", ""),
    ("update", "resourceclaims", "resource.k8s.io", "default", "claim-1"),
    ("update", "resourceclaims/status", "resource.k8s.io", "default", "claim-1"),
    ("create", "deviceclasses", "resource.k8s.io", "", ""),
    ("get", "computedomains", "resource.nvidia.com", "default", ""),
]


@pytest.mark.parametrize("attrs", NEEDED, ids=lambda a: f"{a[0]}-{a[1]}")
def test_service_account_may_make_the_plugins_calls(installed: Installed, attrs: tuple[str, ...]) -> None:
    verb, resource, group, namespace, name = attrs
    assert allowed(installed, verb, resource, group, namespace, name)


@pytest.mark.parametrize("attrs", NOT_NEEDED, ids=lambda a: f"{a[0]}-{a[1]}")
def test_service_account_may_do_nothing_else(installed: Installed, attrs: tuple[str, ...]) -> None:
    verb, resource, group, namespace, name = attrs
    assert not allowed(installed, verb, resource, group, namespace, name)


def slice_for(node: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-test"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def write_as_plugin(
    installed: Installed, verb: str, obj: dict[str, Any], node: str | None, dry_run: bool = True
) -> subprocess.CompletedProcess[str]:
    """kubectl VERB (create/replace/delete) as the plugin's ServiceAccount on `node` (None: no node extra).

    The impersonation goes into a kubeconfig (`as`, `as-user-extra`): kubectl's --as-user-extra flag is
    new in 1.35, the kubeconfig fields work with every kubectl of the matrix."""
    config = yaml.safe_load(installed.server.kubeconfig.read_text())
    user = config["users"][0]["user"]
    user["as"] = installed.user
    if node:
        user["as-user-extra"] = {NODE_EXTRA: [node]}
    kubeconfig = installed.server.kubeconfig.with_name(f"as-plugin-{node or 'no-node'}.kubeconfig")
    kubeconfig.write_text(yaml.safe_dump(config))
    return replace(installed.server, kubeconfig=kubeconfig).kubectl(
        verb, *(["--dry-run=server"] if dry_run else []), "-f", "-", input=json.dumps(obj)
    )


def test_policy_limits_slice_writes_to_the_plugins_node(installed: Installed) -> None:
    # The policy is enforced once the API server has loaded it: wait for the first denial.
    foreign = slice_for("node-b", installed.driver)
    denied = wait_for(
        lambda: (r := write_as_plugin(installed, "create", foreign, "node-a")).returncode and r,
        what="the ValidatingAdmissionPolicy to deny a foreign slice",
        timeout=60,
    )
    assert (
        "the kubelet plugin on node 'node-a' may only write ResourceSlices of that node, not slices of "
        "node 'node-b'" in denied.stderr
    )

    own = slice_for("node-a", installed.driver)
    created = write_as_plugin(installed, "create", own, "node-a", dry_run=False)
    assert created.returncode == 0, created.stderr
    without_node = write_as_plugin(installed, "create", slice_for("node-c", installed.driver), None)
    assert "no node name in the request's user info" in without_node.stderr

    # Updating or deleting another node's slice is denied too; its own it may update.
    current = json.loads(
        installed.server.kubectl("get", "resourceslice", own["metadata"]["name"], "-o", "json").stdout
    )
    updated = {**current, "spec": {**current["spec"], "pool": {**current["spec"]["pool"], "generation": 2}}}
    assert write_as_plugin(installed, "replace", updated, "node-a").returncode == 0
    assert "not slices of node 'node-a'" in write_as_plugin(installed, "replace", updated, "node-b").stderr
    assert "not slices of node 'node-a'" in write_as_plugin(installed, "delete", own, "node-b").stderr
    deleted = write_as_plugin(installed, "delete", own, "node-a", dry_run=False)
    assert deleted.returncode == 0, deleted.stderr

    # Other users (the admin here) are not limited by the policy.
    admin = installed.server.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(foreign))
    assert admin.returncode == 0, admin.stderr


# -- the ComputeDomain side (resources.computeDomains.enabled): each component's RBAC on a real authorizer --

# binding conditions (resources.computeDomains.bindingConditions) → namespace and release of that install.
CD_INSTALLS = {False: ("cd-driver", "fp-cd"), True: ("cd-binding-driver", "fp-cdb")}
CD_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
# (group, resource) → namespaced?
CD_RESOURCES = {
    ("", "nodes"): False,
    ("", "pods"): True,
    ("apps", "daemonsets"): True,
    ("coordination.k8s.io", "leases"): True,
    ("resource.k8s.io", "resourceslices"): False,
    ("resource.k8s.io", "resourceclaims"): True,
    ("resource.k8s.io", "resourceclaims/status"): True,
    ("resource.k8s.io", "resourceclaimtemplates"): True,
    ("resource.nvidia.com", "computedomains"): True,
    ("resource.nvidia.com", "computedomains/status"): True,
    ("resource.nvidia.com", "computedomaincliques"): True,
}


@dataclass(frozen=True)
class CdInstalled:
    namespace: str
    binding_conditions: bool
    objs: list[dict[str, Any]]


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "binding-conditions"])
def cd_installed(request: pytest.FixtureRequest, rbac_apiserver: ApiServer) -> CdInstalled:
    """The chart with ComputeDomains (and, for the second param, binding conditions) in its own namespace
    and driver name (next to `installed`)."""
    binding: bool = request.param
    namespace, release = CD_INSTALLS[binding]
    objs = render(
        namespace,
        release,
        f"gpu.{release}.example.com",
        "--set",
        "resources.computeDomains.enabled=true",
        "--set",
        f"resources.computeDomains.bindingConditions={str(binding).lower()}",
    )
    created = rbac_apiserver.kubectl("create", "namespace", namespace)
    assert created.returncode == 0, created.stderr
    applied = rbac_apiserver.kubectl("apply", "-f", "-", input=as_list(objs))
    assert applied.returncode == 0, applied.stderr
    return CdInstalled(namespace, binding, objs)


def reviews_allowed(
    server: ApiServer, user: str, namespace: str, attrs: list[tuple[str, str, str, str, str]]
) -> list[bool]:
    """SubjectAccessReviews for (verb, group, resource, namespace, name), as the ServiceAccount `user`
    of `namespace`, in one kubectl call."""
    reviews = [
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": [
                    "system:serviceaccounts",
                    f"system:serviceaccounts:{namespace}",
                    "system:authenticated",
                ],
                "resourceAttributes": {
                    "verb": verb,
                    "group": group,
                    "resource": resource.split("/")[0],
                    "subresource": resource.partition("/")[2],
                    "namespace": ns,
                    "name": name,
                },
            },
        }
        for verb, group, resource, ns, name in attrs
    ]
    result = server.kubectl("create", "-f", "-", "-o", "json", input=as_list(reviews))
    assert result.returncode == 0, result.stderr
    # kubectl prints one JSON document per object it created, one after the other (not a List).
    decoder, text, at, items = json.JSONDecoder(), result.stdout, 0, []
    while text[at:].strip():
        at += len(text[at:]) - len(text[at:].lstrip())
        doc, at = decoder.raw_decode(text, at)
        items += doc["items"] if doc.get("kind") == "List" else [doc]
    assert len(items) == len(attrs), result.stdout
    return [bool(item["status"].get("allowed")) for item in items]


@pytest.mark.parametrize("component", ["controller", "kubelet-plugin", "daemon"])
def test_compute_domain_service_accounts_may_make_exactly_their_calls(
    rbac_apiserver: ApiServer, cd_installed: CdInstalled, component: str
) -> None:
    """tests/harness/rbac.py's table of each component's calls, on a real RBAC authorizer: every call allowed
    where the table says (a cluster row in any namespace, a namespace row in the release's only), every
    other verb on those resources refused, in the release namespace and in another one. With binding
    conditions the controller's extra calls, and nothing else."""
    from tests.harness.rbac import (
        CONTROLLER_BINDING_CONDITIONS_CALLS,
        CONTROLLER_CALLS,
        DAEMON_CALLS,
        KUBELET_PLUGIN_CALLS,
    )

    def only(kind: str) -> dict[str, Any]:
        [obj] = [o for o in cd_installed.objs if o["kind"] == kind]
        return obj

    pod = {k: only(k)["spec"]["template"]["spec"] for k in ("Deployment", "DaemonSet")}
    binding = CONTROLLER_BINDING_CONDITIONS_CALLS if cd_installed.binding_conditions else set()
    service_account, calls = {
        "controller": (pod["Deployment"]["serviceAccountName"], CONTROLLER_CALLS | binding),
        "kubelet-plugin": (pod["DaemonSet"]["serviceAccountName"], KUBELET_PLUGIN_CALLS),
        "daemon": ("compute-domain-daemon-service-account", DAEMON_CALLS),
    }[component]
    lease = only("Deployment")["metadata"]["name"]
    wrong = wrong_answers(
        rbac_apiserver,
        f"system:serviceaccount:{cd_installed.namespace}:{service_account}",
        cd_installed.namespace,
        CD_RESOURCES,
        calls,
        own={
            ("coordination.k8s.io", "leases", "get"): lease,
            ("coordination.k8s.io", "leases", "update"): lease,
        },
    )
    assert wrong == [], f"{component}: (attributes, should be allowed) that the API server answered otherwise"


def wrong_answers(
    server: ApiServer,
    user: str,
    namespace: str,
    resources: dict[tuple[str, str], bool],
    calls: set[tuple[str, ...]],
    own: dict[tuple[str, str, str], str],
) -> list[tuple[tuple[str, ...], bool]]:
    """Every verb on every resource (namespaced: in `namespace` and in another one), asked of the real
    authorizer for `user`: (attributes, should be allowed) where it answered otherwise. Allowed: what
    `calls` holds (a cluster row anywhere, a namespace row in `namespace` only). A (group, resource, verb)
    of `own` is granted for that object name only: asked for it and, refused, for another name."""
    attrs: list[tuple[str, str, str, str, str]] = []
    expected: list[bool] = []
    for (group, resource), namespaced in resources.items():
        for verb in CD_VERBS:
            for where in [namespace, "team-b"] if namespaced else [""]:
                scope = "cluster" if where != namespace else "namespace"
                granted = (scope, group, resource, verb) in calls or (
                    "cluster",
                    group,
                    resource,
                    verb,
                ) in calls
                name = own.get((group, resource, verb), "")
                if name:
                    attrs.append((verb, group, resource, where, f"{name}-other"))
                    expected.append(False)
                attrs.append((verb, group, resource, where, name))
                expected.append(granted)
    got = reviews_allowed(server, user, namespace, attrs)
    return [(a, want) for a, want, have in zip(attrs, expected, got, strict=True) if want != have]


FLEET_NAMESPACE, FLEET_RELEASE = "fleet-driver", "fp-fleet"
FLEET_RESOURCES = {
    ("", "nodes"): False,
    ("", "pods"): True,
    ("", "events"): True,
    ("resource.k8s.io", "resourceslices"): False,
    ("resource.k8s.io", "resourceclaims"): True,
    ("rbac.authorization.k8s.io", "clusterroles"): False,
}


def test_fleet_service_account_may_make_exactly_its_calls(rbac_apiserver: ApiServer) -> None:
    """Fleet mode's RBAC (tests/harness/rbac.py FLEET_CALLS) on a real authorizer: every call of the fleet
    allowed, in any namespace; every other verb on those resources refused; its own ClusterRole readable
    (the Nodes' owner), no other."""
    from tests.harness.rbac import FLEET_CALLS

    objs = render(
        FLEET_NAMESPACE, FLEET_RELEASE, "gpu.fleet.example.com", "-f", "tests/golden/chart/values/fleet.yaml"
    )
    created = rbac_apiserver.kubectl("create", "namespace", FLEET_NAMESPACE)
    assert created.returncode == 0, created.stderr
    applied = rbac_apiserver.kubectl("apply", "-f", "-", input=as_list(objs))
    assert applied.returncode == 0, applied.stderr
    [deployment, *_] = [o for o in objs if o["kind"] == "Deployment" and "-fleet-" in o["metadata"]["name"]]
    service_account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    wrong = wrong_answers(
        rbac_apiserver,
        f"system:serviceaccount:{FLEET_NAMESPACE}:{service_account}",
        FLEET_NAMESPACE,
        FLEET_RESOURCES,
        FLEET_CALLS,
        own={("rbac.authorization.k8s.io", "clusterroles", v): service_account for v in CD_VERBS},
    )
    assert wrong == [], "fleet: (attributes, should be allowed) that the API server answered otherwise"
