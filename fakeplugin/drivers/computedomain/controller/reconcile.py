"""What NVIDIA's controller does for one ComputeDomain, as an ordered list of actions (pure).

Source (main 95932046): cmd/compute-domain-controller/computedomain.go `onAddOrUpdateDriverManaged` and
`onAddOrUpdateHostManaged`, with the managers they call (daemonset.go, resourceclaimtemplate.go, node.go)
and the cleanup of objects whose ComputeDomain is gone (cleanup.go). The loop (`loop.py`) runs the actions
in order and stops at a `Wait`; the next pass (an event or the 2 s tick) plans again from what it sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakeplugin.apis import computedomain as api
from fakeplugin.drivers.computedomain.controller import objects, status
from fakeplugin.drivers.computedomain.controller.objects import DaemonSettings

Obj = dict[str, Any]


@dataclass(frozen=True)
class Create:
    obj: Obj


@dataclass(frozen=True)
class Delete:
    obj: Obj


@dataclass(frozen=True)
class AddFinalizer:
    obj: Obj


@dataclass(frozen=True)
class RemoveFinalizer:
    obj: Obj


@dataclass(frozen=True)
class SetStatus:
    cd: Obj
    status: str


@dataclass(frozen=True)
class RemoveNodeLabels:
    """Remove resource.nvidia.com/computeDomain from every node it names this UID on."""

    cd_uid: str


@dataclass(frozen=True)
class Wait:
    """Stop here; plan again later (NVIDIA's controller returns an error and its work queue retries)."""

    reason: str


Action = Create | Delete | AddFinalizer | RemoveFinalizer | SetStatus | RemoveNodeLabels | Wait


@dataclass(frozen=True)
class Owned:
    """The objects labelled with one ComputeDomain's UID, as the controller's caches hold them."""

    workload_templates: tuple[Obj, ...] = ()
    daemon_templates: tuple[Obj, ...] = ()
    daemon_sets: tuple[Obj, ...] = ()


@dataclass(frozen=True)
class Mode:
    """How the controller runs: its flags and gates, the same for every ComputeDomain."""

    daemon: DaemonSettings
    host_managed: bool = False  # --imex-mode hostManaged (release 0.5.0-dev, gate HostManagedIMEXDaemon)
    cliques_gate: bool = True  # ComputeDomainCliques
    binding_conditions: bool = False  # --binding-conditions (ours, beyond NVIDIA's releases: binding.py)


def deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def has_finalizer(obj: Obj) -> bool:
    return api.FINALIZER in (obj["metadata"].get("finalizers") or [])


def plan(cd: Obj, owned: Owned, mode: Mode) -> list[Action]:
    """The ComputeDomain's next actions: its teardown once deleted, else what is missing."""
    if deleting(cd):
        return teardown(objects.uid_of(cd), owned, cd, host_managed=mode.host_managed)
    actions: list[Action] = []
    if not has_finalizer(cd):
        actions.append(AddFinalizer(cd))
    if not mode.host_managed and not owned.daemon_sets:
        # The DaemonSet's manager makes the daemon template first, only when no DaemonSet exists.
        if not owned.daemon_templates:
            actions.append(Create(objects.daemon_template(cd, mode.daemon.namespace)))
        actions.append(Create(objects.daemon_set(cd, mode.daemon)))
    if not owned.workload_templates:
        actions.append(Create(workload_template(cd, host_managed=mode.host_managed)))
    current = cd.get("status") or {}
    wanted = status.global_status(
        status.num_nodes(cd), current.get("nodes") or [], host_managed=mode.host_managed
    )
    if current.get("status") != wanted:
        actions.append(SetStatus(cd, wanted))
    return actions


def workload_template(cd: Obj, *, host_managed: bool) -> Obj:
    """Host-managed IMEX has only channel 0 to give: its template asks for Single whatever the spec says
    (resourceclaimtemplate.go `channelAllocationModeFor`)."""
    template = objects.workload_template(cd)
    if host_managed:
        template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["allocationMode"] = (
            api.ALLOCATION_SINGLE
        )
    return template


def teardown(cd_uid: str, owned: Owned, cd: Obj | None, *, host_managed: bool = False) -> list[Action]:
    """NVIDIA's order: delete the workload template, the daemon template and the DaemonSet; remove the
    node labels; take the finalizer off the workload template and wait until it is gone; then off the
    daemon template and the DaemonSet, and wait; last, off the ComputeDomain. `cd` None: the ComputeDomain
    is gone already and these are its leftovers (cleanup.go: the same steps, without the last)."""
    daemon_objects = () if host_managed else (*owned.daemon_templates, *owned.daemon_sets)
    actions: list[Action] = [
        Delete(obj) for obj in (*owned.workload_templates, *daemon_objects) if not deleting(obj)
    ]
    if not host_managed:
        actions.append(RemoveNodeLabels(cd_uid))
    for group in (owned.workload_templates, daemon_objects):
        for obj in group:
            if not deleting(obj):
                return [*actions, Wait(f"{_name(obj)} not yet marked for deletion")]
            if has_finalizer(obj):
                actions.append(RemoveFinalizer(obj))
        if group:
            return [*actions, Wait(f"{_name(group[0])} still exists")]
    if cd is not None and has_finalizer(cd):
        actions.append(RemoveFinalizer(cd))
    return actions


def _name(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{obj.get('kind', '')} {meta.get('namespace', '')}/{meta['name']}"
