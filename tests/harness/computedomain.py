"""Shared by the compute-domain.nvidia.com unit tests: the names, an inventory with a fabric, opaque configs,
claims, and `Api`, the plugin's API calls answered from dicts."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from fakeplugin.apis import computedomain as api
from fakeplugin.model import ClaimRef

CD_DRIVER = api.DRIVER_NAME
NODE = "gb200-a-0"
CD_UID = "0f3c6a52-7d1e-4b8a-9c2f-5e6d7a8b9c01"
CLUSTER = "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"
CLIQUE_ID = f"{CLUSTER}.2"
NAMESPACE = "nvidia-dra-driver-gpu"
BOOT = "8d1b7d52-0a0c-4a1e-9e8f-1c2d3e4f5a6b"


def inventory(**fabric: Any) -> dict[str, Any]:
    return {
        "driverVersion": "580.126.20",
        "cudaDriverVersion": "13.0",
        "nodes": [
            {
                "namePrefix": "gb200-a-",
                "replicas": 18,
                "gpus": [{"profile": "gb200", "count": 4}],
                "fabric": fabric,
            },
            {"name": "hgx-h200", "gpus": [{"profile": "h200", "count": 8}]},
        ],
    }


def channel_config(**extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": CD_UID,
        **extra,
    }


class Api:
    """The driver's API calls, answered from dicts (a unit-test stand-in for fakeplugin.kube.Kube)."""

    def __init__(self) -> None:
        self.domains = {CD_UID: {"metadata": {"uid": CD_UID, "name": "imex", "namespace": "team-a"}}}
        self.cliques: dict[str, dict[str, Any]] = {}
        self.node = {"metadata": {"name": NODE, "uid": "node-uid", "resourceVersion": "1", "labels": {}}}
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}

    def compute_domain(self, uid: str) -> dict[str, Any] | None:
        return self.domains.get(uid)

    def compute_domain_clique(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.cliques:
            raise ApiException(status=404, reason="Not Found")
        return self.cliques[(namespace, name)]

    def get_node(self, name: str) -> dict[str, Any]:
        return json.loads(json.dumps(self.node))

    def patch_node_labels(
        self, name: str, labels: dict[str, str | None], *, resource_version: str
    ) -> dict[str, Any]:
        rv = self.node["metadata"]["resourceVersion"]
        assert resource_version in ("", rv)  # "": unconditional
        current = self.node["metadata"]["labels"]
        for key, value in labels.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        self.node["metadata"]["resourceVersion"] = str(int(rv) + 1)
        return self.node

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        if (namespace, name) not in self.claims:
            raise ApiException(status=404, reason="Not Found")
        return self.claims[(namespace, name)]

    def ready(self, status: str = "Ready") -> None:
        daemon = {
            "nodeName": NODE,
            "ipAddress": "10.0.0.1",
            "cliqueID": CLIQUE_ID,
            "index": 0,
            "status": status,
        }
        self.cliques[(NAMESPACE, f"{CD_UID}.{CLIQUE_ID}")] = {"daemons": [daemon]}


def allocation(
    device: str, *, config: dict[str, Any] | None = None, requests: list[str] | None = None
) -> dict[str, Any]:
    request = "channel" if device.startswith("channel") else "daemon"
    configs = [
        {
            "source": "FromClaim",
            "requests": requests or [],
            "opaque": {"driver": CD_DRIVER, "parameters": config},
        }
    ]
    return {
        "devices": {
            "results": [{"request": request, "driver": CD_DRIVER, "pool": NODE, "device": device}],
            "config": configs if config else [],
        }
    }


def add_claim(api: Api, uid: str, device: str, namespace: str = "team-a", **config: Any) -> ClaimRef:
    if device.startswith("channel"):
        cfg = channel_config(**config)
    else:
        cfg = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainDaemonConfig",
            "domainID": CD_UID,
        }
    api.claims[(namespace, f"claim-{uid}")] = {
        "metadata": {"uid": uid, "name": f"claim-{uid}", "namespace": namespace},
        "status": {"allocation": allocation(device, config=cfg)},
    }
    return ClaimRef(namespace, uid, f"claim-{uid}")
