"""The ComputeDomain API as NVIDIA's driver defines it: group and kinds, the labels, finalizer and object
names its controller, daemon and kubelet plugin agree on, and our CRD files (package data, NVIDIA's schema).

Sources (kubernetes-sigs/dra-driver-nvidia-gpu main 95932046): api/nvidia.com/resource/v1beta1/api.go,
computedomain.go, computedomainclique.go, computedomainconfig.go; cmd/compute-domain-controller/
computedomain.go (labels, finalizer, DeviceClass names), daemonset.go and resourceclaimtemplate.go (names).
"""

from __future__ import annotations

from importlib import resources
from typing import Any
from urllib.parse import quote

import yaml

GROUP = "resource.nvidia.com"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
CLIQUE_KIND = "ComputeDomainClique"
CHANNEL_CONFIG_KIND = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND = "ComputeDomainDaemonConfig"

DRIVER_NAME = "compute-domain.nvidia.com"

# On the daemon DaemonSet, its pods, both ResourceClaimTemplates, the cliques, and on a node whose channel
# claim is prepared (that label pulls the daemon pod onto the node): the ComputeDomain's UID.
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
# On a daemon pod: its clique ID ("" on a node without a multi-node NVLink fabric).
CLIQUE_ID_LABEL = "resource.nvidia.com/computeDomain.cliqueID"
# On a ResourceClaimTemplate: whom it is for.
TARGET_LABEL = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON = "Daemon"
TARGET_WORKLOAD = "Workload"
# On the ComputeDomain, both templates and the DaemonSet (the same string as the label key).
FINALIZER = COMPUTE_DOMAIN_LABEL

# On a node of a multi-node NVLink fabric: its clique ID, as GPU Feature Discovery sets it (schedulers use it
# for affinity; NVIDIA's kubelet plugin sets it too with --gpu-clique-label-enabled).
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"

DEFAULT_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
_DRIVER_PREFIX = "compute-domain"

STATUS_READY = "Ready"
STATUS_NOT_READY = "NotReady"
# KEP-5007 condition types of the channel device with --binding-conditions (ours, beyond NVIDIA's releases:
# its closed PRs #855/#1359 name none we could read); condition types are label names
# (kubernetes v1.37.2 pkg/apis/resource/validation/validation.go validateDeviceBindingParameters).
READY_CONDITION = "ComputeDomainDaemonReady"
FAILED_CONDITION = "ComputeDomainDaemonFailed"
ALLOCATION_SINGLE = "Single"
ALLOCATION_ALL = "All"


def device_class(name: str, driver: str = DRIVER_NAME) -> str:
    """DeviceClass `name` (DEFAULT_CHANNEL_CLASS, DAEMON_CLASS) of a driver running as `driver`: for
    `compute-domain.<rest>` the class `<prefix>.<rest>`, so the fake can run beside the real driver."""
    suffix = DRIVER_NAME.removeprefix(_DRIVER_PREFIX)
    return name.removesuffix(suffix) + driver.removeprefix(_DRIVER_PREFIX)


def daemon_name(cd_uid: str) -> str:
    """The daemon DaemonSet's and the daemon ResourceClaimTemplate's name (driver namespace)."""
    return f"computedomain-daemon-{cd_uid}"


def clique_name(cd_uid: str, clique_id: str) -> str:
    """A ComputeDomainClique's name (driver namespace): `<cdUID>.<cliqueID>`, the clique ID itself being
    `<ClusterUUID>.<CliqueId>`."""
    return f"{cd_uid}.{clique_id}"


def compute_domains_path(namespace: str = "") -> str:
    """The ComputeDomains of `namespace` (every namespace when empty)."""
    return _path("computedomains", namespace)


def cliques_path(namespace: str) -> str:
    return _path("computedomaincliques", namespace)


def clique_path(namespace: str, name: str) -> str:
    return f"{cliques_path(namespace)}/{quote(name, safe='')}"


def _path(plural: str, namespace: str) -> str:
    where = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
    return f"/apis/{API_VERSION}{where}/{plural}"


def crds() -> list[dict[str, Any]]:
    """Our CustomResourceDefinitions (computedomains and computedomaincliques), as the chart installs
    NVIDIA's: the schema of v0.4.1 and main (see crds/ for the one difference in v25.12.0)."""
    folder = resources.files(__package__).joinpath("crds")
    return [
        yaml.safe_load(entry.read_text())
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    ]
