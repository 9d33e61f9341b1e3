"""NVIDIA's compute-domain-controller: for each ComputeDomain, the objects its controller makes, its global
status, and their removal in NVIDIA's order. Pure steps (`objects`, `status`, `reconcile`) and the edges
that run them (`loop`: caches, writes, the 2 s status sync; `lease`: leader election).
"""
