"""API definitions several components share, on the ground floor (docs/architecture.md, "Layers"): names,
kinds, paths and CRDs, importing nothing of fakeplugin, so the generic API client (fakeplugin.kube) needs
no driver.

computedomain.py  NVIDIA's ComputeDomain API (`resource.nvidia.com`): group, kinds, labels, names, paths
crds/             our ComputeDomain CRD files (package data, NVIDIA's schema)
"""
