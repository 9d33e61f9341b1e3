"""The prepare path: claim → our allocated devices → checkpoint → CDI spec (+ fake nvidia-smi data).

preparer.py     Preparer: Prepare/Unprepare over claims, the node-wide lock, the state machine
claims.py       claim references and allocation results → what is ours to prepare (pure)
opaqueconfig.py the claims' opaque configs (resource.nvidia.com/v1beta1) → typed DeviceSettings (pure)
checkpoint.py   prepared-claim state: data, JSON form (pure), its file
cdi.py          claim + devices + settings → CDI spec (pure); spec files (atomic)
smi.py          the fake nvidia-smi: its script, per-GPU data files, their CDI mounts
"""
