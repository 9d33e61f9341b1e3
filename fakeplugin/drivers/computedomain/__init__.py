"""compute-domain.nvidia.com, NVIDIA's ComputeDomains (multi-node NVLink, IMEX): the second driver of NVIDIA's
DRA driver repository, all three of its programs (`cmd/compute-domain-kubelet-plugin/`,
`cmd/compute-domain-controller/`, `cmd/compute-domain-daemon/`). docs/compute-domains.md says what is
emulated and from which source; the API (names, kinds, CRDs) is fakeplugin.apis.computedomain.

The kubelet plugin, on the runtime. Pure: `slices` (the two devices a node publishes), `deviceclasses` (the
chart's classes), `opaqueconfig` (ComputeDomainChannelConfig, ComputeDomainDaemonConfig), `cdispec` (a
claim's edits and spec), `checkpoint`'s format, `fabric` (the start's read of the NVLink fabric). At the
edges: `domains` (the ComputeDomain API calls and node label), `client` (its API client over
fakeplugin.kube, with the ComputeDomain informer), `cliquelabel` (the nvidia.com/gpu.clique label),
`devices` (a claim's groups prepared: the domain directory), `preparer` (checkpoint state machine, CDI
files), `emulateddaemon` (the daemon's part where no daemon pod runs), `plugin` (Driver and NodePlugin).

The other two programs: `controller/` (`fakeplugin compute-domain-controller`) and `daemon.py` (the IMEX
daemon's Kubernetes part: `fakeplugin compute-domain-daemon`). Outside this folder, only what is exported
here, `controller/` and `daemon` are imported (tests/test_layers.py).
"""

from fakeplugin.apis.computedomain import DRIVER_NAME
from fakeplugin.drivers.computedomain.client import DomainClient
from fakeplugin.drivers.computedomain.deviceclasses import device_classes
from fakeplugin.drivers.computedomain.plugin import ComputeDomainDriver, ComputeDomainNode
from fakeplugin.drivers.computedomain.slices import node_slices

__all__ = [
    "DRIVER_NAME",
    "ComputeDomainDriver",
    "ComputeDomainNode",
    "DomainClient",
    "device_classes",
    "node_slices",
]
