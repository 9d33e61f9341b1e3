"""The Kubernetes API edge: building a client, reading nodes and claims, writing ResourceSlices.

Objects are plain dicts in API shape, read and written through the official client's generic calls,
so no field is ever lost in a model class.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

RESOURCE_GROUP = "resource.k8s.io"
RESOURCE_VERSION = "v1"
# Every call carries a deadline: a hung API server must never hang Prepare or the publisher.
REQUEST_TIMEOUT = 15.0


def new_api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from `kubeconfig`, else the in-cluster service account, else ~/.kube/config."""
    if kubeconfig:
        try:
            api = config.new_client_from_config(config_file=kubeconfig)
        except (config.ConfigException, OSError) as exc:
            raise ValueError(f"kubeconfig {kubeconfig}: {exc}") from exc
    else:
        try:
            config.load_incluster_config()
            api = client.ApiClient()
        except config.ConfigException:
            api = config.new_client_from_config()
    if not api.configuration.verify_ssl:
        # Said once here instead of a urllib3 warning on every request.
        log.warning("the kubeconfig disables TLS verification of %s", api.configuration.host)
        warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    return api


@dataclass(frozen=True)
class NodeInfo:
    name: str
    uid: str
    labels: dict[str, str]


class Kube:
    """The handful of API calls the plugin makes (and nothing more: see the chart's RBAC)."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    def get_node(self, name: str) -> NodeInfo:
        node = self._core.read_node(name, _request_timeout=REQUEST_TIMEOUT)
        return NodeInfo(name=name, uid=node.metadata.uid, labels=dict(node.metadata.labels or {}))

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._custom.get_namespaced_custom_object(
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            namespace,
            "resourceclaims",
            name,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def list_slices(self, *, driver: str, node_name: str) -> tuple[list[dict[str, Any]], str]:
        """This node's slices of this driver, and the list's resourceVersion (to watch from)."""
        result = self._custom.list_cluster_custom_object(
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            "resourceslices",
            field_selector=f"spec.driver={driver},spec.nodeName={node_name}",
            _request_timeout=REQUEST_TIMEOUT,
        )
        return list(result.get("items", [])), result["metadata"]["resourceVersion"]

    def create_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._custom.create_cluster_custom_object(
            RESOURCE_GROUP, RESOURCE_VERSION, "resourceslices", body, _request_timeout=REQUEST_TIMEOUT
        )

    def replace_slice(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._custom.replace_cluster_custom_object(
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            "resourceslices",
            body["metadata"]["name"],
            body,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def delete_slice(self, existing: dict[str, Any]) -> None:
        meta = existing["metadata"]
        # Preconditions: never delete a slice someone replaced since we read it.
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"])
        )
        try:
            self._custom.delete_cluster_custom_object(
                RESOURCE_GROUP,
                RESOURCE_VERSION,
                "resourceslices",
                meta["name"],
                body=options,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    def watch_slices(self, *, driver: str, node_name: str, resource_version: str, timeout_seconds: int):
        """Yield watch events (dicts with type/object) until the server closes the watch."""
        from kubernetes import watch

        w = watch.Watch()
        yield from w.stream(
            self._custom.list_cluster_custom_object,
            RESOURCE_GROUP,
            RESOURCE_VERSION,
            "resourceslices",
            field_selector=f"spec.driver={driver},spec.nodeName={node_name}",
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _request_timeout=timeout_seconds + REQUEST_TIMEOUT,
        )


def describe_api_error(exc: Exception) -> str:
    """One readable line for an API failure (status + reason, or the connection problem)."""
    if isinstance(exc, ApiException):
        reason = exc.reason or ""
        try:
            import json

            reason = json.loads(exc.body or "{}").get("message", reason)
        except ValueError:
            pass
        return f"{exc.status} {reason}".strip()
    return f"{type(exc).__name__}: {exc}"
