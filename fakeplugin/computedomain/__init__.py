"""NVIDIA's second DRA driver, ComputeDomains (`compute-domain.nvidia.com`), from the API side: the
controller (`controller/`) and the IMEX daemon's Kubernetes part (`daemon`); the names, labels, finalizer
and CRDs they and the kubelet plugin share are fakeplugin.apis.computedomain. docs/compute-domains.md says
what is emulated and from which upstream source.
"""
