"""kubectl for end-to-end tests on any cluster object with a `kubectl(*args, input=)` (FakepluginCluster,
fakeplugin.cluster.Cluster): apply objects, read them back, wait for conditions. The objects themselves
come from fakeplugin.testing's builders (`resource_claim`, `claim_pod`, ...)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml

from fakeplugin.cluster import versions
from fakeplugin.testing import resource_claim, resource_claim_template

T = TypeVar("T")


def wait_for(fn: Callable[[], T | None], *, what: str, timeout: float = 120.0, interval: float = 0.5) -> T:
    """Poll fn until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


def apply(cluster: Any, namespace: str | None, *objs: dict[str, Any]) -> None:
    args = ["apply", "-f", "-"] + (["-n", namespace] if namespace else [])
    cluster.kubectl(*args, input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def apply_file(cluster: Any, namespace: str, path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    apply(cluster, namespace, *docs)
    return docs


def get(cluster: Any, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def items(cluster: Any, *args: str) -> list[dict[str, Any]]:
    return get(cluster, *args)["items"]


def pod_phase(cluster: Any, namespace: str, name: str) -> str:
    return get(cluster, "pod", name, "-n", namespace).get("status", {}).get("phase", "")


def health_watched_claim(
    cluster: Any, template_name: str, *requests: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """A claim of `requests` whose device health this cluster's kubelet shows in the pod status, and the
    pod's entry for it (for `claim_pod`): from a template named `template_name`, or on a kubelet that
    only finds claims named as the pod's entry, a ResourceClaim named `gpu`
    (versions.KubernetesRelease.health_status_claims)."""
    if versions.release(cluster.local.kubernetes_version).health_status_claims == "named":
        return resource_claim("gpu", *requests), {"resourceClaimName": "gpu"}
    return resource_claim_template(template_name, *requests), {"resourceClaimTemplateName": template_name}


def pod_claim_name(cluster: Any, namespace: str, pod: str) -> str:
    """The ResourceClaim object behind the pod's first claim entry (generated or named)."""
    obj = get(cluster, "pod", pod, "-n", namespace)
    statuses = obj["status"].get("resourceClaimStatuses") or []
    if statuses:
        return statuses[0]["resourceClaimName"]
    return obj["spec"]["resourceClaims"][0]["resourceClaimName"]
