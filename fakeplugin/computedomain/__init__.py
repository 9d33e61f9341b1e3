"""NVIDIA's second DRA driver, ComputeDomains (`compute-domain.nvidia.com`), from the API side: the names,
labels, finalizer and CRDs that its controller, daemon and kubelet plugin share (`api`), and the controller
(`controller/`). docs/compute-domains.md says what is emulated and from which upstream source.
"""
