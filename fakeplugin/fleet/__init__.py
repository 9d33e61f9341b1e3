"""The fleet: one process that is the DRA side of every kubelet of a kwok-simulated fleet.

kwok (sigs.k8s.io/kwok) plays the nodes and their pods through its stages; the fleet plays what a GPU
node's kubelet and its fakeplugin would do for DRA, for every simulated node at once, on the same runtime
as `fakeplugin serve` (one runtime.host.Host per driver):

    publish:  inventory ─▶ each driver's NodePlugin per node ─▶ runtime.publisher (one list + watch for all
              pools) ─▶ API server (the same ResourceSlices `fakeplugin serve` publishes for that node)
    prepare:  pod bound to a simulated node (one pod watch, kubelet.py) ─▶ podclaims.py: its claims ─▶
              poddra.py: the node's plugin of each claim's driver (CDI spec, checkpoint, nvidia-smi data in
              the node's dir) ─▶ annotation fakeplugin.dev/prepared ─▶ kwok's pod-ready stage (stages.py)
              makes the pod Running
    delete:   pod deleting ─▶ kwok's pod-terminate stage sets it Failed (as the kubelet, stages.py) ─▶
              Unprepare (claims no other pod on the node uses) ─▶ fakeplugin.dev/unprepared ─▶ kwok's
              pod-delete stage deletes it (grace 0; finalizers stay their owners')
    reconcile: on start, every re-list of the pods and every minute (reconcile.py, the kubelet's loop)
              ─▶ Unprepare the checkpointed claims no active pod uses or whose claim is gone; records of
              gone pods and the files of gone nodes removed

A failed prepare leaves the pod Pending with the kubelet's FailedPrepareDynamicResources event and is
retried, as the kubelet retries on pod sync. Also: fleet.py (Fleet), shard.py (--shard), records.py
(container records), nodeobjects.py (simulated Node objects), api.py, dirs.py, heap.py and malloc.py
(memory flat under churn).
"""
