"""The real driver's feature gates (kubernetes-sigs/dra-driver-nvidia-gpu pkg/featuregates/featuregates.go
at each release's tag: docs/driver-releases.md), parsed from "A=true,B=false".

Which gates exist, and their defaults, depends on the driver release (fakeplugin.releases). `settings` is
the list syntax alone, shared with Kubernetes' gates of the local cluster (cluster.components).
"""

from __future__ import annotations

from typing import NamedTuple

from fakeplugin import releases
from fakeplugin.releases import DriverRelease

# name -> default, every gate of every emulated release (the chart's schema lists these).
KNOWN: dict[str, bool] = {
    name: default for r in releases.RELEASES.values() for name, default in r.feature_gates.items()
}


_BOOLS = {"true": True, "false": False}


class Setting(NamedTuple):
    item: str  # as written, for messages
    name: str
    value: bool | None  # None: the item is not `name=true` or `name=false`


def settings(text: str | None) -> list[Setting]:
    """The items of an `A=true,B=false` list in order: empty items skipped, spaces around names and values
    dropped, values case-insensitive. Which names exist, and the messages, are each caller's."""
    out = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        name, sep, value = item.partition("=")
        out.append(Setting(item, name.strip(), _BOOLS.get(value.strip().lower()) if sep else None))
    return out


def parse(text: str | None, release: DriverRelease | None = None) -> dict[str, bool]:
    """The release's gates (default: the default release's) with their values; names the release does
    not know, non-boolean values, or a combination the release refuses at start are an error."""
    release = release or releases.get(None)
    gates = dict(release.feature_gates)
    for item, name, value in settings(text):
        if name not in gates:
            raise ValueError(
                f"--feature-gates: unknown feature gate {name!r} in NVIDIA driver release {release.name}; "
                f"known: {', '.join(sorted(gates))}" + _elsewhere(name)
            )
        if value is None:
            raise ValueError(f"--feature-gates: {item!r}: expected {name}=true or {name}=false")
        gates[name] = value
    for rule in release.gate_rules:
        if problem := rule.problem(gates):
            raise ValueError(f"--feature-gates: {problem}")
    return gates


def _elsewhere(name: str) -> str:
    others = [r.name for r in releases.RELEASES.values() if name in r.feature_gates]
    if not others:
        return ""
    return f" ({name} is a gate of release{'s' if len(others) > 1 else ''} {', '.join(others)})"
