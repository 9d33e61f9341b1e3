"""GPU telemetry as NVIDIA's dcgm-exporter serves it: `/metrics` with DCGM's field names, labels and DRA
attribution, values following each GPU's simulated load (docs/telemetry.md).

    exporters.py   the dcgm-exporter releases emulated, as data (label names, attribution, fields)
    counters.py    a counters CSV (the exporter's default shipped as package data)
    load.py        the fakeplugin.dev/gpu-load annotation
    samples.py     devices + faults + uses + loads → series (pure)
    attribution.py the DRA attribution: which pod and claim each series stands for (pure)
    fabrichealth.py  a GPU's fabric health as DCGM's fields (pure)
    exposition.py  series → the exporter's text (pure)
    expfmt.py      the text's order and numbers from release 4.6.0-4.8.3 on (pure)
    uses.py        who uses which device: the fleet's derivation from claims and pods (pure)
    podresources.py  the kubelet's PodResources List over its socket (serve)
    source.py      a host's nodes read at one moment (runtime.driver.DeviceStates), load and energy kept
    endpoint.py    the HTTP server: bounded handlers, one render shared per interval
    start.py       starting it from serve's and fleet's flags
    nvmllive.py    the same values (and faults) as NVML's live states in claims' containers (serve)
"""
