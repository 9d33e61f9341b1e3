"""The prepare path: claim → our allocated devices → checkpoint → CDI spec (+ fake nvidia-smi data).

preparer.py     Preparer: Prepare/Unprepare over claims, the node-wide lock, the state machine
resolve.py      a claim reference → what it asks of this node (GET, faults, pool), outside the lock
claims.py       claim references and allocation results → what is ours to prepare (pure)
faults.py       fakeplugin.dev/* claim annotations → injected errors, fail counts and delays
overlap.py      may a claim have a device another prepared claim holds (pure: the real driver's rule)
opaqueconfig.py the claims' opaque configs (resource.nvidia.com/v1beta1) → typed DeviceSettings (pure)
checkpoint.py   prepared-claim state: data, JSON form (pure), its file
groupcommit.py  concurrent calls' claims committed in batches: two checkpoint writes per batch
nodelock.py     the node-wide prep/unprep lock (threads and processes), bounded waits
claimfiles.py   what a prepared claim leaves on the host: its CDI spec and nvidia-smi data, written/removed
cdi.py          claim + devices + settings → CDI spec (pure); spec files (atomic)
smi.py          the fake nvidia-smi: its script and awk program, per-GPU data files, their CDI mounts
stale.py        temp files a killed plugin left midway, removed at start
"""
