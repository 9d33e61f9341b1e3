"""The API calls a fleet makes beyond a node plugin's (fakeplugin.kube.Kube): pod annotations, the
kubelet's events, and which ResourceClaims exist (its reconcile). Plain dicts in API shape, like Kube."""

from __future__ import annotations

import datetime
from urllib.parse import quote

from fakeplugin.kube import NODES, RESOURCE_GROUP, RESOURCE_VERSION, Kube, Obj

CLAIMS = f"/apis/{RESOURCE_GROUP}/{RESOURCE_VERSION}/resourceclaims"


class FleetKube(Kube):
    def node_names(self) -> set[str]:
        """The names of every Node of the cluster (their metadata only)."""
        items, _ = self.list(NODES, metadata_only=True)
        return {n["metadata"]["name"] for n in items}

    def claim_uids(self) -> set[str]:
        """The UIDs of every ResourceClaim of the cluster (their metadata only)."""
        items, _ = self.list(CLAIMS, metadata_only=True)
        return {c["metadata"]["uid"] for c in items}

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> Obj:
        return self.annotate(
            f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}", annotations
        )

    def pod_event(self, pod: Obj, *, node: str, reason: str, message: str, warning: bool = True) -> Obj:
        """An Event on `pod` as the node's kubelet reports it (source: kubelet, host: the node)."""
        meta = pod["metadata"]
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet",
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return self._json("POST", f"/api/v1/namespaces/{quote(meta['namespace'], safe='')}/events", body=body)
