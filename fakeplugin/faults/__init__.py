"""fakeplugin's faults (docs/faults.md): what a user sets on a Node or a claim to make a GPU, a fabric, an
IMEX daemon or a Prepare fail, and what each fault means where it is read. Pure, but claimfaults' delays,
which sleep in the caller's thread.

devicefaults.py  a Node's `fakeplugin.dev/device-faults` → the real driver's device taints and health
devicehealth.py  a device's health from its fault, as the DRA health service reports it
fabricfaults.py  a Node's `fakeplugin.dev/fabric-state` → the NVLink fabric state of its GPUs
claimfaults.py   a claim's `fakeplugin.dev/*` annotations → injected errors, fail counts and delays
daemonfaults.py  a Node's ComputeDomain daemon annotations → a daemon NotReady, out of its clique, failed
"""
