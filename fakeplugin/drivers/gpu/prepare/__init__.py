"""gpu.nvidia.com's prepare path: claim → our allocated devices → checkpoint → CDI spec (+ fake nvidia-smi
data). The claim checks, allocation results, node lock and group commit it uses are the runtime's; claim
faults are fakeplugin.faults.claimfaults; the CDI library is fakeplugin.cdi.

preparer.py     GpuPreparer: Prepare/Unprepare over claims, the node-wide lock, the state machine
resolve.py      a checked claim → a GpuRequest (faults, our devices in the pool), outside the lock
overlap.py      may a claim have a device another prepared claim holds (pure: the real driver's rule)
opaqueconfig.py the claims' opaque configs (resource.nvidia.com/v1beta1) → typed DeviceSettings (pure)
checkpoint.py   prepared-claim state: data, JSON form (pure), its file
claimfiles.py   what a prepared claim leaves on the host: its CDI spec, nvidia-smi data, NVML descriptions
cdispec.py      claim + devices + settings → the claim's CDI spec (pure); earlier versions' specs upgraded
devicestatus.py --device-status: a prepared claim's devices in its status.devices
smi.py          the fake nvidia-smi: its script and awk program, per-GPU data files, their CDI mounts
nvmldata.py     a container's devices → the description the mock NVML library reads (pure), its files
stale.py        temp files a killed plugin left midway, removed at start
"""
