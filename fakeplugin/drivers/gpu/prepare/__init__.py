"""gpu.nvidia.com's prepare path: claim → our allocated devices → checkpoint → CDI spec (+ fake nvidia-smi
data). The node lock and group commit it uses are the runtime's (runtime.nodelock, runtime.groupcommit).

preparer.py     Preparer: Prepare/Unprepare over claims, the node-wide lock, the state machine
resolve.py      a claim reference → what it asks of this node (GET, faults, pool), outside the lock
allocation.py   claim references and allocation results → what is ours to prepare (pure)
claimfaults.py  fakeplugin.dev/* claim annotations → injected errors, fail counts and delays
overlap.py      may a claim have a device another prepared claim holds (pure: the real driver's rule)
opaqueconfig.py the claims' opaque configs (resource.nvidia.com/v1beta1) → typed DeviceSettings (pure)
checkpoint.py   prepared-claim state: data, JSON form (pure), its file
claimfiles.py   what a prepared claim leaves on the host: its CDI spec and nvidia-smi data, written/removed
cdi.py          claim + devices + settings → CDI spec (pure); spec files (atomic)
smi.py          the fake nvidia-smi: its script and awk program, per-GPU data files, their CDI mounts
stale.py        temp files a killed plugin left midway, removed at start
"""
