"""compute-domain.nvidia.com: the kubelet plugin of NVIDIA's ComputeDomains (multi-node NVLink, IMEX),
the second driver of NVIDIA's DRA driver repository (`cmd/compute-domain-kubelet-plugin/`), on the runtime.

Pure: `slices` (the two devices a node publishes), `deviceclasses` (the chart's classes), `opaqueconfig`
(ComputeDomainChannelConfig, ComputeDomainDaemonConfig), `cdi` (a claim's edits and spec), `checkpoint`'s
format, `fabric` (the start's read of the NVLink fabric). At the edges: `domains` (the ComputeDomain API
calls and node label), `client` (its API client over fakeplugin.kube, with the ComputeDomain informer),
`cliquelabel` (the nvidia.com/gpu.clique label), `devices` (a claim's groups prepared: the domain
directory), `preparer` (checkpoint state machine, CDI files), `plugin` (Driver and
NodePlugin). docs/compute-domains.md says what is emulated and from which source.
"""

from fakeplugin.apis.computedomain import DRIVER_NAME
from fakeplugin.drivers.computedomain.client import DomainClient
from fakeplugin.drivers.computedomain.plugin import ComputeDomainDriver, ComputeDomainNode

__all__ = ["DRIVER_NAME", "ComputeDomainDriver", "ComputeDomainNode", "DomainClient"]
