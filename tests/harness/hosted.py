"""A NodePlugin as a host drives it (`serve`, `fleet`): Prepare through the runtime's claim checks
(runtime.claims: one GET per claim, allocated, UID), the rest of the contract straight to the plugin."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fakeplugin.model import ClaimRef, PrepareResult
from fakeplugin.runtime import claims
from fakeplugin.runtime.driver import GetClaim, NodePlugin


class Hosted:
    """`prepare(refs)` and `unprepare(refs)` as the gRPC edge calls them (a runtime.driver.Claims); any
    other attribute is the plugin's."""

    def __init__(self, plugin: NodePlugin, get_claim: GetClaim) -> None:
        self.plugin = plugin
        self._get_claim = get_claim

    def prepare(self, refs: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        return claims.prepare(self.plugin, refs, self._get_claim)

    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        return claims.unprepare(self.plugin, refs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.plugin, name)
