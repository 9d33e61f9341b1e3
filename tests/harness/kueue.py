"""Kueue in end-to-end tests, on any cluster object with a `kubectl` (tests/harness/kube.py): the examples of
examples/kueue/ created as Jobs, and what Kueue's Workload for a Job says (admitted, refused, its usage).
Used by tests/e2e/test_kueue.py (the local cluster) and tests/kind/test_kueue.py (Kueue's chart in kind)."""

from __future__ import annotations

import uuid
from typing import Any

import yaml

from fakeplugin.fleet.stages import COMPLETE_AFTER
from tests.harness.kube import apply, get, items
from tests.harness.paths import EXAMPLES

KUEUE = EXAMPLES / "kueue"


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUEUE / name).read_text()) if d]


def create_job(
    cluster: Any,
    example: str,
    namespace: str,
    *,
    pods: int | None = None,
    cel: str | None = None,
    complete_after: str | None = None,
) -> str:
    """The example's Job created, with its claim template (if any) first, both named after the Job; the
    Job's name."""
    *templates, job = docs(example)
    name = job["metadata"].pop("generateName") + uuid.uuid4().hex[:5]
    job["metadata"]["name"] = name
    spec = job["spec"]
    if pods is not None:
        spec["parallelism"] = spec["completions"] = pods
    annotations = spec["template"].setdefault("metadata", {}).setdefault("annotations", {})
    annotations.pop(COMPLETE_AFTER, None)
    if complete_after:
        annotations[COMPLETE_AFTER] = complete_after
    for template in templates:
        template["metadata"]["name"] = name
        if cel is not None:
            (request,) = template["spec"]["spec"]["devices"]["requests"]
            request["exactly"]["selectors"] = [{"cel": {"expression": cel}}]
        (entry,) = spec["template"]["spec"]["resourceClaims"]
        entry["resourceClaimTemplateName"] = name
    apply(cluster, namespace, *templates, job)
    return name


def workload(cluster: Any, job: str, namespace: str) -> dict[str, Any] | None:
    for w in items(cluster, "workloads.kueue.x-k8s.io", "-n", namespace):
        if any(o["kind"] == "Job" and o["name"] == job for o in w["metadata"].get("ownerReferences", [])):
            return w
    return None


def condition(w: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    return next((c for c in ((w or {}).get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def admitted(cluster: Any, job: str, namespace: str) -> dict[str, Any] | None:
    w = workload(cluster, job, namespace)
    return w if condition(w, "Admitted").get("status") == "True" else None


def refused(cluster: Any, job: str, namespace: str, reason: str = "Pending") -> dict[str, Any] | None:
    """The Job's Workload once Kueue refused it quota for `reason` (QuotaReserved False: Pending, waiting
    for quota; Inadmissible, it can never fit), else None."""
    w = workload(cluster, job, namespace)
    reserved = condition(w, "QuotaReserved")
    return w if reserved.get("status") == "False" and reserved.get("reason") == reason else None


def finished(cluster: Any, job: str, namespace: str) -> dict[str, Any] | None:
    w = workload(cluster, job, namespace)
    return w if condition(w, "Finished").get("status") == "True" else None


def usage(w: dict[str, Any]) -> dict[str, str]:
    (assignment,) = w["status"]["admission"]["podSetAssignments"]
    return assignment["resourceUsage"]


def suspended(cluster: Any, job: str, namespace: str) -> bool:
    return get(cluster, "job", job, "-n", namespace)["spec"].get("suspend") is True
