"""A picture of the fleet: a read-only live web page of the nodes and their GPUs (docs/fleet-view.md).

`store` follows the cluster through watches (list + watch, runtime.informer) and keeps slim copies
(`objects`); `model` turns a snapshot of them into the page's data, pure; `server` serves the page (package
data under static/) and its JSON on loopback, with Server-Sent Events when the watches see a change.
`fakeplugin view` runs it alone (as `cluster up --view-endpoint` does), `fakeplugin fleet
--view-endpoint` beside the fleet.
"""
