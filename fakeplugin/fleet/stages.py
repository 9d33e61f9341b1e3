"""kwok's configuration for a fleet: the Stages that make simulated nodes Ready and move their pods (pure).

kwok applies the first Stage whose selector matches an object (sigs.k8s.io/kwok, pkg/apis Stage:
`selector.matchExpressions` keys are jq paths, operators In/NotIn/Exists/DoesNotExist). Pods that use
ResourceClaims wait for the fleet: Running only once it annotated PREPARED (what the kubelet's
NodePrepareResources gates: kubernetes/kubernetes v1.35 pkg/kubelet/cm/dra/manager.go), gone only once it
annotated UNPREPARED (NodeUnprepareResources, same file).

A deleted pod ends as the kubelet ends it (kubernetes/kubernetes v1.37.2): a pod not yet Succeeded or Failed
is first set Failed, its containers terminated and the conditions others wrote (DisruptionTarget) kept
(pkg/kubelet/status/status_manager.go TerminatePod and mergePodStatus, pkg/kubelet/kubelet_pods.go
getPhase), a pod with claims only once the fleet unprepared them (pkg/kubelet/kubelet.go SyncTerminatingPod
unprepares before the status changes, so the claim controller, which deallocates a terminal pod's claims,
never deallocates a prepared claim); only a pod whose phase is terminal is deleted, with grace 0 and its
finalizers left to their owners, a Job's tracking finalizer to the Job controller (status_manager.go
syncPod, canBeDeleted). Jobs see such a pod Failed with its DisruptionTarget condition, which their
podFailurePolicy matches.
"""

from __future__ import annotations

from typing import Any

import yaml

# kwok manages the Nodes that carry this annotation (its --manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
PREPARED = "fakeplugin.dev/prepared"
UNPREPARED = "fakeplugin.dev/unprepared"
# A pod annotated with a Go duration ("30s") ends Succeeded that long after it runs, as a Job's pods end
# (kwok's own pod-complete stage, opt-in here); its claims are then unprepared (fleet.kubelet).
COMPLETE_AFTER = "fakeplugin.dev/complete-after"

_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
_TERMINAL = ["Succeeded", "Failed"]
_ENDED = {"key": ".status.phase", "operator": "In", "values": _TERMINAL}
_NOT_ENDED = {"key": ".status.phase", "operator": "NotIn", "values": _TERMINAL}
_NO_CLAIMS = [
    {"key": ".spec.resourceClaims", "operator": "DoesNotExist"},
    {"key": ".status.extendedResourceClaimStatus", "operator": "DoesNotExist"},  # DRAExtendedResource
]
_PENDING_NOT_READY = [
    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
    {
        "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
        "operator": "NotIn",
        "values": ["True"],
    },
]

# Templates render to the object's new status (Go text/template with kwok's functions: Now, Quote, ...).
_NODE_STATUS = """\
{{ $now := Now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $now | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: fake
  osImage: simulated by kwok (fakeplugin fleet)
phase: Running
"""

_POD_RUNNING = """\
{{ $now := Now }}
conditions:
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Initialized}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: Ready}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: ContainersReady}
- {lastTransitionTime: {{ $now | Quote }}, status: "True", type: PodScheduled}
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ $meta := .metadata }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or $meta.uid "" ) \
  ( or $meta.name "" ) ( or $meta.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _pod_ended(phase: str, exit_code: int, reason: str, condition_reason: str) -> str:
    """The status of a pod whose containers all ended with `exit_code` (`reason`): Ready and
    ContainersReady False for `condition_reason`. Conditions merge by type (kwok patches status with a
    strategic merge), so those others wrote, an eviction's DisruptionTarget, stay."""
    conditions = "".join(
        f'- {{lastTransitionTime: {{{{ $now | Quote }}}}, status: "False", type: {kind}, '
        f"reason: {condition_reason}}}\n"
        for kind in ("Ready", "ContainersReady")
    )
    return f"""\
{{{{ $now := Now }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  started: false
  restartCount: 0
  state:
    terminated:
      exitCode: {exit_code}
      reason: {reason}
      finishedAt: {{{{ $now | Quote }}}}
{{{{ end }}}}
conditions:
{conditions}phase: {phase}
"""


_POD_SUCCEEDED = _pod_ended("Succeeded", 0, "Completed", "PodCompleted")
# A deleted pod's end: its containers killed (exit code 137, 128 + SIGKILL; "Error" is containerd's reason
# for a non-zero exit, containerd/containerd internal/cri/server/helpers.go errorExitReason), Ready and
# ContainersReady False for PodFailed (kubernetes/kubernetes v1.37.2 pkg/kubelet/status/generate.go).
_POD_FAILED = _pod_ended("Failed", 137, "Error", "PodFailed")


def _stage(
    name: str,
    kind: str,
    expressions: list[dict[str, Any]],
    nxt: dict[str, Any],
    delay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceRef": {"apiGroup": "v1", "kind": kind},
        "selector": {"matchExpressions": expressions},
        "next": nxt,
    }
    if delay:
        spec["delay"] = delay
    return {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Stage", "metadata": {"name": name}, "spec": spec}


def _annotated(key: str) -> dict[str, Any]:
    return {"key": f'.metadata.annotations["{key}"]', "operator": "In", "values": ["true"]}


def kwok_stages() -> list[dict[str, Any]]:
    """The Stages a fleet's kwok runs with (its --config file holds these documents)."""
    running = {"statusTemplate": _POD_RUNNING}
    gone = {"delete": True}
    failed = {"statusTemplate": _POD_FAILED}
    return [
        _stage(
            "node-ready",
            "Node",
            [
                {
                    "key": '.status.conditions.[] | select( .type == "Ready" ) | .status',
                    "operator": "NotIn",
                    "values": ["True"],
                }
            ],
            {"statusTemplate": _NODE_STATUS},
        ),
        _stage("pod-ready", "Pod", [_NOT_DELETING, *_NO_CLAIMS, *_PENDING_NOT_READY], running),
        _stage(
            "pod-ready-prepared", "Pod", [_NOT_DELETING, _annotated(PREPARED), *_PENDING_NOT_READY], running
        ),
        _stage(
            "pod-complete",
            "Pod",
            [
                _NOT_DELETING,
                {"key": f'.metadata.annotations["{COMPLETE_AFTER}"]', "operator": "Exists"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
            ],
            {"statusTemplate": _POD_SUCCEEDED},
            delay={
                "durationMilliseconds": 0,
                "durationFrom": {"expressionFrom": f'.metadata.annotations["{COMPLETE_AFTER}"]'},
            },
        ),
        _stage("pod-terminate", "Pod", [_DELETING, _NOT_ENDED, *_NO_CLAIMS], failed),
        _stage("pod-terminate-unprepared", "Pod", [_DELETING, _NOT_ENDED, _annotated(UNPREPARED)], failed),
        _stage("pod-delete", "Pod", [_DELETING, _ENDED, *_NO_CLAIMS], gone),
        _stage("pod-delete-unprepared", "Pod", [_DELETING, _ENDED, _annotated(UNPREPARED)], gone),
    ]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the templates) as YAML literal blocks, readable in kwok's config file."""


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)


# kwok plays 4 stages at a time by default (podPlayStageParallelism, nodePlayStageParallelism); a
# thousand-node fleet starting thousands of pods wants more (bench/fleet.py).
PARALLELISM = 16


def kwok_configuration() -> dict[str, Any]:
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"podPlayStageParallelism": PARALLELISM, "nodePlayStageParallelism": PARALLELISM},
    }


def kwok_config_yaml() -> str:
    """kwok's --config file: its KwokConfiguration and kwok_stages(), as one multi-document YAML."""
    return yaml.dump_all([kwok_configuration(), *kwok_stages()], Dumper=_Dumper, sort_keys=False)
