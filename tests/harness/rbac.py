"""Every API call each ComputeDomain component makes, from its code: the table the chart's RBAC must
grant exactly (tests/test_chart_computedomains.py, tests/test_chart_fleet_telemetry.py) and a real API
server's authorizer must allow exactly (tests/e2e/test_chart_install_rbac.py)."""

from __future__ import annotations

RESOURCE_SLICE_VERBS = ("get", "list", "watch", "create", "update", "delete")
# Every API call each ComputeDomain component makes, from its code: (scope, apiGroup, resource, verb) with
# scope "cluster" (a ClusterRole) or "namespace" (a Role in the release namespace, the driver's). The chart's
# RBAC must grant exactly these, nothing more: a new call in the code needs a row here and a rule there.
CONTROLLER_CALLS = {
    # loop.py Controller.cds: list + watch of every namespace; _set_finalizers: PUT of the whole object.
    ("cluster", "resource.nvidia.com", "computedomains", "list"),
    ("cluster", "resource.nvidia.com", "computedomains", "watch"),
    ("cluster", "resource.nvidia.com", "computedomains", "update"),
    # loop.py _patch_status: merge patch of <cd>/status.
    ("cluster", "resource.nvidia.com", "computedomains/status", "patch"),
    # loop.py Controller.templates (TEMPLATES, every namespace); _do Create / Delete; _set_finalizers.
    ("cluster", "resource.k8s.io", "resourceclaimtemplates", "list"),
    ("cluster", "resource.k8s.io", "resourceclaimtemplates", "watch"),
    ("cluster", "resource.k8s.io", "resourceclaimtemplates", "create"),
    ("cluster", "resource.k8s.io", "resourceclaimtemplates", "update"),
    ("cluster", "resource.k8s.io", "resourceclaimtemplates", "delete"),
    # loop.py _remove_node_labels: list by label, merge patch.
    ("cluster", "", "nodes", "list"),
    ("cluster", "", "nodes", "patch"),
    # loop.py Controller.daemon_sets (driver namespace); Create, Delete, _set_finalizers.
    ("namespace", "apps", "daemonsets", "list"),
    ("namespace", "apps", "daemonsets", "watch"),
    ("namespace", "apps", "daemonsets", "create"),
    ("namespace", "apps", "daemonsets", "update"),
    ("namespace", "apps", "daemonsets", "delete"),
    # loop.py Controller.pods (driver namespace, the daemon pods).
    ("namespace", "", "pods", "list"),
    ("namespace", "", "pods", "watch"),
    # loop.py Controller.cliques; _drop_daemons: merge patch.
    ("namespace", "resource.nvidia.com", "computedomaincliques", "list"),
    ("namespace", "resource.nvidia.com", "computedomaincliques", "watch"),
    ("namespace", "resource.nvidia.com", "computedomaincliques", "patch"),
    # lease.py LeaderElector: GET, POST when absent, PUT to renew and to release.
    ("namespace", "coordination.k8s.io", "leases", "create"),
    ("namespace", "coordination.k8s.io", "leases", "get"),
    ("namespace", "coordination.k8s.io", "leases", "update"),
}
# With --binding-conditions (the chart's resources.computeDomains.bindingConditions), besides:
CONTROLLER_BINDING_CONDITIONS_CALLS = {
    # loop.py Controller.claims (CLAIMS, every namespace): list + watch; _put_claim_status: PUT of its status.
    ("cluster", "resource.k8s.io", "resourceclaims", "list"),
    ("cluster", "resource.k8s.io", "resourceclaims", "watch"),
    ("cluster", "resource.k8s.io", "resourceclaims/status", "update"),
    # loop.py Controller.nodes: list (granted above) + watch; _label_node: merge patch (granted above).
    ("cluster", "", "nodes", "watch"),
}
# `fakeplugin serve`, both containers (one ServiceAccount): the GPU plugin's calls (rbac.yaml) plus those of
# --plugin compute-domains (drivers/computedomain/client.py DomainClient: its ComputeDomain informer,
# compute_domain_clique, patch_node_labels).
KUBELET_PLUGIN_CALLS = {
    # The Node informer's GET by name; compute-domains: plugin.py _fetch_node at start (the fabric fault).
    ("cluster", "", "nodes", "get"),
    ("cluster", "", "nodes", "watch"),
    *{("cluster", "resource.k8s.io", "resourceslices", v) for v in RESOURCE_SLICE_VERBS},
    ("cluster", "resource.k8s.io", "resourceclaims", "get"),
    # domains.py DomainManager.domain → client.py DomainCache: list + watch of every namespace (found by
    # UID); a lookup before the first list, or of a UID not seen yet, lists once more.
    ("cluster", "resource.nvidia.com", "computedomains", "list"),
    ("cluster", "resource.nvidia.com", "computedomains", "watch"),
    # domains.py add_node_label / remove_node_label, cliquelabel.py CliqueLabel (--gpu-clique-label-enabled)
    # → DomainClient.patch_node_labels (its own node).
    ("cluster", "", "nodes", "patch"),
    # domains.py DomainManager._clique → DomainClient.compute_domain_clique (driver namespace).
    ("namespace", "resource.nvidia.com", "computedomaincliques", "get"),
}
# With `serve --telemetry-endpoint` (the chart's telemetry.enabled), besides: telemetry/source.py
# KubeletAttribution._fetch GETs each claim (granted above) and pod the kubelet's PodResources List names.
KUBELET_PLUGIN_TELEMETRY_CALLS = {("cluster", "", "pods", "get")}
# With `serve --device-status` (the chart's kubeletPlugin.deviceStatus), besides: prepare/devicestatus.py
# StatusWriter, a PUT of the claim's status (its GET granted above); from 1.36 the API server also checks
# the synthetic resourceclaims/driver (resourceNames: the driver name).
KUBELET_PLUGIN_DEVICE_STATUS_CALLS = {
    ("cluster", "resource.k8s.io", "resourceclaims/status", "update"),
    ("cluster", "resource.k8s.io", "resourceclaims/driver", "associated-node:update"),
}
# With `serve --gpu-operator-labels` (the chart's gpuOperator.mode other than none), besides:
# drivers/gpu/labeller.py OperatorLabeller, a merge patch of its own Node.
KUBELET_PLUGIN_GPU_OPERATOR_LABELS_CALLS = {("cluster", "", "nodes", "patch")}
# `fleet --telemetry-endpoint`: telemetry/source.py ClaimWatch, a list (granted) + watch of every claim.
FLEET_TELEMETRY_CALLS = {("cluster", "resource.k8s.io", "resourceclaims", "watch")}
DAEMON_CALLS = {
    # daemon.py CliqueMember.label_pod: merge patch of its pod; DaemonRun: its pod by name (GET + watch).
    ("namespace", "", "pods", "patch"),
    ("namespace", "", "pods", "get"),
    ("namespace", "", "pods", "watch"),
    # daemon.py CliqueMember.join (create when absent), _update (GET + PUT).
    ("namespace", "resource.nvidia.com", "computedomaincliques", "create"),
    ("namespace", "resource.nvidia.com", "computedomaincliques", "get"),
    ("namespace", "resource.nvidia.com", "computedomaincliques", "update"),
    # daemon.py DaemonRun: its node by name (GET + watch), for the not-ready fault.
    ("cluster", "", "nodes", "get"),
    ("cluster", "", "nodes", "watch"),
}
# `fakeplugin fleet --create-nodes --owner-cluster-role` (the chart's fleet mode; GPU driver only).
FLEET_CALLS = {
    # runtime.host's Node informer (list + watch, label selector); fleet.nodeobjects NodeOwner.sync: a
    # metadata list by its owner label, POST, merge patch of the labels, DELETE; reconcile: a metadata list.
    ("cluster", "", "nodes", "list"),
    ("cluster", "", "nodes", "watch"),
    ("cluster", "", "nodes", "create"),
    ("cluster", "", "nodes", "patch"),
    ("cluster", "", "nodes", "delete"),
    *{("cluster", "resource.k8s.io", "resourceslices", v) for v in RESOURCE_SLICE_VERBS},
    # poddra.py PodDRA.get_claim; reconcile: FleetKube.claim_uids (a metadata list).
    ("cluster", "resource.k8s.io", "resourceclaims", "get"),
    ("cluster", "resource.k8s.io", "resourceclaims", "list"),
    # kubelet.py FleetKubelet: list + watch of every pod; poddra.py: FleetKube.annotate_pod (merge patch).
    ("cluster", "", "pods", "list"),
    ("cluster", "", "pods", "watch"),
    ("cluster", "", "pods", "patch"),
    # FleetKube.pod_event (FailedPrepareDynamicResources).
    ("cluster", "", "events", "create"),
    # nodeobjects.cluster_role_owner: its own ClusterRole by name (resourceNames: that one only).
    ("cluster", "rbac.authorization.k8s.io", "clusterroles", "get"),
}
