"""Which simulated nodes one fleet process serves, when several share a cluster (pure).

As kwok shards (each controller manages the nodes its label or annotation selector matches), a fleet may
serve only the Nodes a label selector matches (`--manage-nodes-with-label-selector`, kwok's flag name,
filtered by the API server), and of those only its share of a stable hash of the node name
(`--shard i/n`: crc32, the same in every process and every run, unlike Python's hash()).

Invariant: for a given n every node name belongs to exactly one of the shards 0..n-1, so n processes with
the same n and the indexes 0..n-1 serve every node once; a node whose shard is down waits for it.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

_SPEC = re.compile(r"^(\d+)/(\d+)$")


@dataclass(frozen=True)
class Shard:
    index: int = 0
    count: int = 1

    def owns(self, node: str) -> bool:
        return self.count == 1 or zlib.crc32(node.encode()) % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = Shard()  # one fleet serving every node


def parse_shard(text: str) -> Shard:
    """`i/n` (0 <= i < n), e.g. `0/2` and `1/2` for two processes; a clear error otherwise."""
    m = _SPEC.match(text.strip())
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise ValueError(f"--shard {text!r}: expected i/n with 0 <= i < n, e.g. 0/2 and 1/2 for two fleets")
    return Shard(int(m.group(1)), int(m.group(2)))
