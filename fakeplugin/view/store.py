"""What the view knows of the cluster, kept current by watches: one informer loop (runtime.informer: list,
watch from the list's version, list again when the watch ends, every failure retried with
runtime.retry's backoff) per kind of fakeplugin.view.objects. Nothing is polled.

The ComputeDomain kinds are custom resources a cluster may not have: their informers start once a watch of
their CustomResourceDefinition sees it (a cluster without ComputeDomains costs two idle watches, no
retries of a 404).

Every change that alters a slim copy bumps `version` and wakes `wait_change`'s callers (the page's event
streams); the model of a version is built once, on first ask (`model`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from fakeplugin.kube import Kube, Obj
from fakeplugin.runtime.informer import Source, list_and_watch
from fakeplugin.view.model import FleetModel, Snapshot, build
from fakeplugin.view.objects import Kind

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def established(crd: Obj) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


class FleetStore:
    """Slim objects by kind, a version, and the model of the newest version. `apply` and `replace` are
    how the informers (and a test, or the bench's synthetic fleet) change it."""

    def __init__(self, kinds: Sequence[Kind], *, group_label: str = "") -> None:
        self.kinds = {k.name: k for k in kinds}
        self._objects: dict[str, dict[str, Obj]] = {k.name: {} for k in kinds}
        self._synced: dict[str, bool] = {k.name: False for k in kinds}
        self._group_label = group_label
        self._changed = threading.Condition()
        self._version = 0
        self._model: FleetModel | None = None
        self._build = threading.Lock()

    # -- changes ------------------------------------------------------------------------------------

    def replace(self, kind: str, items: Sequence[Obj]) -> None:
        """A fresh list of `kind`: what it holds now, the kind synced."""
        k = self.kinds[kind]
        fresh = {k.key(obj): slim for obj in items if (slim := k.slim(obj)) is not None}
        with self._changed:
            changed = fresh != self._objects[kind] or not self._synced[kind]
            self._objects[kind] = fresh
            self._synced[kind] = True
            if changed:
                self._bump()

    def apply(self, kind: str, event: str, obj: Obj) -> None:
        """A watch event (ADDED, MODIFIED, DELETED) of `kind`."""
        k = self.kinds[kind]
        key = k.key(obj)
        slim = None if event == "DELETED" else k.slim(obj)
        with self._changed:
            objects = self._objects[kind]
            if objects.get(key) == slim:
                return  # nothing the page shows changed
            if slim is None:
                objects.pop(key)
            else:
                objects[key] = slim
            self._bump()

    def absent(self, kind: str) -> None:
        """`kind`'s API does not exist (no CRD): empty, and synced as such."""
        self.replace(kind, [])

    def _bump(self) -> None:
        self._version += 1
        self._changed.notify_all()

    # -- reading ------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        with self._changed:
            return self._version

    @property
    def synced(self) -> bool:
        with self._changed:
            return all(self._synced.values())

    def wait_change(self, seen: int, timeout: float) -> int:
        """The version, once it is past `seen` or `timeout` seconds passed."""
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout=timeout)
            return self._version

    def wake(self) -> None:
        """Wake every `wait_change` (the server is closing)."""
        with self._changed:
            self._changed.notify_all()

    def snapshot(self) -> Snapshot:
        with self._changed:
            kinds = {kind: dict(objects) for kind, objects in self._objects.items()}
            return Snapshot(kinds, self._version, all(self._synced.values()))

    def model(self) -> FleetModel:
        """The model of the newest version, built at most once per version."""
        with self._build:
            if self._model is None or self._model.summary["version"] != self.version:
                self._model = build(self.snapshot(), group_label=self._group_label)
            return self._model


class Watches:
    """The informers that keep a FleetStore current, until `stop`."""

    def __init__(self, kube: Kube, store: FleetStore) -> None:
        self._kube, self._store = kube, store
        self._started: set[str] = set()
        self._mutex = threading.Lock()

    def start(self, stop: threading.Event) -> None:
        crds: dict[str, Kind] = {}
        for kind in self._store.kinds.values():
            if kind.crd:
                crds[kind.crd] = kind
            else:
                self._start(kind, stop)
        for crd, kind in crds.items():
            self._follow_crd(crd, kind, stop)

    def _start(self, kind: Kind, stop: threading.Event) -> None:
        with self._mutex:
            if kind.name in self._started:
                return
            self._started.add(kind.name)
        source = Source(kind.path, field_selector=kind.field_selector)
        threading.Thread(
            target=list_and_watch,
            args=(self._kube, source),
            kwargs=dict(
                stop=stop,
                on_list=lambda items: self._store.replace(kind.name, items),
                on_event=lambda event, obj: self._store.apply(kind.name, event, obj),
                synced=threading.Event(),
            ),
            name=f"view-{kind.name}",
            daemon=True,
        ).start()

    def _follow_crd(self, crd: str, kind: Kind, stop: threading.Event) -> None:
        """Watch the CRD of `kind`; its informer starts once the CRD is established (a CRD deleted later
        leaves the informer retrying, with backoff, as any watch whose API went away)."""

        def seen(objs: Sequence[Obj]) -> None:
            if any(established(o) for o in objs):
                self._start(kind, stop)
            elif kind.name not in self._started:
                self._store.absent(kind.name)

        source = Source(CRDS, field_selector=f"metadata.name={crd}")
        threading.Thread(
            target=list_and_watch,
            args=(self._kube, source),
            kwargs=dict(
                stop=stop,
                on_list=seen,
                on_event=lambda event, obj: seen([obj] if event != "DELETED" else []),
                synced=threading.Event(),
            ),
            name=f"view-crd-{kind.name}",
            daemon=True,
        ).start()
