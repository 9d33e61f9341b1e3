"""Kueue (sigs.k8s.io/kueue) as a real consumer of our slices: its Configuration (config) and manifests
(manifests) for a manager the local cluster runs on loopback (fakeplugin.cluster.kueue; docs/kueue.md)."""
