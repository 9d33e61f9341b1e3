"""What NVIDIA's controller creates for a ComputeDomain, as API objects (pure).

Sources (main 95932046): templates/compute-domain-workload-claim-template.tmpl.yaml,
templates/compute-domain-daemon-claim-template.tmpl.yaml, templates/compute-domain-daemon.tmpl.yaml and the
data cmd/compute-domain-controller/resourceclaimtemplate.go and daemonset.go fill them with. The daemon
runs our image and `fakeplugin compute-domain-daemon` instead of NVIDIA's `compute-domain-daemon`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fakeplugin.apis import computedomain as api

Obj = dict[str, Any]

# The daemon pod's ServiceAccount (NVIDIA's chart: templates/rbac-compute-domain-daemon.yaml).
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"
DAEMON_CONTAINER = "compute-domain-daemon"
DAEMON_CLAIM = "compute-domain-daemon"  # the pod's resourceClaims entry


@dataclass(frozen=True)
class DaemonSettings:
    """What the controller's flags put into every daemon DaemonSet."""

    namespace: str  # the driver's
    image: str
    max_nodes_per_imex_domain: int
    feature_gates: Mapping[str, bool]
    log_verbosity: int = 0
    image_pull_secrets: tuple[str, ...] = ()


def uid_of(cd: Obj) -> str:
    return cd["metadata"]["uid"]


def workload_template(cd: Obj) -> Obj:
    """The workload ResourceClaimTemplate: in the ComputeDomain's namespace, named by
    spec.channel.resourceClaimTemplate.name, one request `channel` with its ComputeDomainChannelConfig."""
    channel = cd["spec"]["channel"]
    config = {
        "apiVersion": api.API_VERSION,
        "kind": api.CHANNEL_CONFIG_KIND,
        "domainID": uid_of(cd),
        "allocationMode": channel.get("allocationMode", api.ALLOCATION_SINGLE),
    }
    return _claim_template(
        namespace=cd["metadata"]["namespace"],
        name=channel["resourceClaimTemplate"]["name"],
        cd_uid=uid_of(cd),
        target=api.TARGET_WORKLOAD,
        request="channel",
        device_class=api.DEFAULT_CHANNEL_CLASS,
        config=config,
    )


def daemon_template(cd: Obj, namespace: str) -> Obj:
    """The daemon ResourceClaimTemplate `computedomain-daemon-<cdUID>` in the driver's namespace: one
    request `daemon` with its ComputeDomainDaemonConfig."""
    config = {"apiVersion": api.API_VERSION, "kind": api.DAEMON_CONFIG_KIND, "domainID": uid_of(cd)}
    return _claim_template(
        namespace=namespace,
        name=api.daemon_name(uid_of(cd)),
        cd_uid=uid_of(cd),
        target=api.TARGET_DAEMON,
        request="daemon",
        device_class=api.DAEMON_CLASS,
        config=config,
    )


def _claim_template(
    *, namespace: str, name: str, cd_uid: str, target: str, request: str, device_class: str, config: Obj
) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "finalizers": [api.FINALIZER],
            "labels": {api.COMPUTE_DOMAIN_LABEL: cd_uid, api.TARGET_LABEL: target},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {"requests": [request], "opaque": {"driver": api.DRIVER_NAME, "parameters": config}}
                    ],
                }
            }
        },
    }


def feature_gates_env(gates: Mapping[str, bool]) -> str:
    """FEATURE_GATES as the daemon template renders it: every gate, sorted, `Name=true,` each."""
    return "".join(f"{name}={str(value).lower()}," for name, value in sorted(gates.items()))


def daemon_set(cd: Obj, settings: DaemonSettings) -> Obj:
    """The daemon DaemonSet `computedomain-daemon-<cdUID>`: on the nodes labelled with the ComputeDomain's
    UID, tolerating every taint, its pod claiming the daemon template; probes run the daemon's `check`."""
    uid = uid_of(cd)
    selector = {api.COMPUTE_DOMAIN_LABEL: uid}
    daemon = ["fakeplugin", "-v", "$(LOG_VERBOSITY)", "compute-domain-daemon"]

    def probe(period: int, failures: int) -> Obj:
        return {
            "exec": {"command": [*daemon, "check"]},
            "periodSeconds": period,
            "timeoutSeconds": 10,
            "failureThreshold": failures,
            "successThreshold": 1,
        }

    env: list[Obj] = [
        {"name": "LOG_VERBOSITY", "value": str(settings.log_verbosity)},
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": str(settings.max_nodes_per_imex_domain)},
        *(
            {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
            for name, path in (
                ("NODE_NAME", "spec.nodeName"),
                ("POD_IP", "status.podIP"),
                ("POD_UID", "metadata.uid"),
                ("POD_NAME", "metadata.name"),
                ("POD_NAMESPACE", "metadata.namespace"),
            )
        ),
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    ]
    if settings.feature_gates:
        env.append({"name": "FEATURE_GATES", "value": feature_gates_env(settings.feature_gates)})
    pod_spec: Obj = {
        "serviceAccountName": DAEMON_SERVICE_ACCOUNT,
        "nodeSelector": dict(selector),
        "containers": [
            {
                "name": DAEMON_CONTAINER,
                "image": settings.image,
                "command": [*daemon, "run"],
                "env": env,
                "resources": {"claims": [{"name": DAEMON_CLAIM}]},
                # NVIDIA's image runs as root (its Dockerfile's USER root:root); ours as 65532, and the daemon
                # writes its state into /imexd, the plugin's root-owned host directory of the domain.
                "securityContext": {"runAsUser": 0},
                "startupProbe": {"initialDelaySeconds": 0, **probe(1, 1200)},
                "livenessProbe": probe(60, 20),
                "readinessProbe": probe(10, 1),
            }
        ],
        "tolerations": [
            {"operator": "Exists", "effect": effect}
            for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
        ],
        "resourceClaims": [{"name": DAEMON_CLAIM, "resourceClaimTemplateName": api.daemon_name(uid)}],
    }
    if settings.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "namespace": settings.namespace,
            "name": api.daemon_name(uid),
            "finalizers": [api.FINALIZER],
            "labels": dict(selector),
        },
        "spec": {
            "selector": {"matchLabels": dict(selector)},
            "template": {"metadata": {"labels": dict(selector)}, "spec": pod_spec},
        },
    }
