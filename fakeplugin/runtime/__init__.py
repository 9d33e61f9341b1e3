"""The plugin runtime every driver shares; a driver (fakeplugin.drivers) only publishes and prepares.

driver.py       the contract: Driver (makes a node's plugin), NodePlugin (publish + prepare), the optional
                capabilities (DeviceHealth, DeviceStates), Claims, NodeDirs
claims.py       the claim checks before any driver: references, one GET, allocated, UID (upstream's texts)
allocation.py   a claim's allocation results that are a driver's own, and the devices prepared from them
claimstatus.py  a claim's status.devices: entries merged and written
preparer.py     NodePreparer: the skeleton of every driver's prepare side (lazy open, batches under the lock)
groupcommit.py  concurrent calls' work committed in batches (two checkpoint writes per batch)
nodelock.py     the node-wide prepare/unprepare lock (threads and processes), bounded waits
bootid.py       the node's boot ID, read once
emulation.py    Emulation: what is emulated (driver name, release with its gates, shares), built once
nodes.py        Nodes: one NodePlugin per served node, following its Node object; the inventory poll
informer.py     list (or GET one object) + watch, again when the watch ends
publisher.py    plan() (pure, the upstream resourceslice controller's rules) and SlicePublisher (one or
                many pools, one list + watch)
host.py         Host: the informer, inventory poll and publisher threads of `serve` or `fleet`
retry.py        the one backoff rule (delay, Backoff) and the loop every API loop runs in (forever)

Its gRPC edge to the kubelet (registration, DRA services, health, call log) is fakeplugin.server.
"""
