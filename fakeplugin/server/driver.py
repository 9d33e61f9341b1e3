"""What the gRPC edge needs from the prepare core."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from fakeplugin.model import ClaimRef, PrepareResult


class Driver(Protocol):
    """The prepare core as the gRPC edge sees it. Both methods block (API calls, file locks); the edge runs
    them in worker threads, never on the event loop."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """Prepare the claims; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare the claims; the result maps claim UID to an error ("" = success)."""
        ...
