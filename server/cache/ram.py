"""The RAM level of the conversation cache: parked engine snapshot images held in host memory.

What this is: a dict of entries, each the image of one context's history as the engine produced it
(a list of pieces of <= 16 MiB, never joined, so it is never held twice), its token ids, its
sealed time and its context's last use. What this is not: admission (policy.py decides whether a capture may stay in RAM) or
the cascade (cascade.py moves entries down).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


def used_at(now: float, idle_s: float | None) -> float:
    """A history's last use on the cache's clock, `idle_s` seconds (None: not known, taken as none) before `now`:
    what a park keeps (RamEntry.used_at) and what the feed's outlook weighs a context's history by alike."""
    return now if idle_s is None else now - idle_s


@dataclass
class RamEntry:
    key: str
    kind: str
    tokens: np.ndarray  # (n_tokens,) int32
    pieces: list[bytes]  # the image, in the engine's pieces
    created_at: float
    sealed_at: float
    meta: dict = field(default_factory=dict)
    used_at: float | None = None   # its context's last use, on the cache's clock (None: not known, its park's)

    @property
    def last_used(self) -> float:
        """When its history was last used: what a stop keeps the most recent of (stop_writes.hand_down_picks)."""
        return self.sealed_at if self.used_at is None else self.used_at

    @property
    def n_bytes(self) -> int:
        return sum(len(p) for p in self.pieces)

    @property
    def image_bytes(self) -> int:
        return self.n_bytes

    @property
    def n_tokens(self) -> int:
        return int(self.tokens.shape[0])


class RamLevel:
    name = "ram"

    def __init__(self, budget_bytes: int, max_age_s: float) -> None:
        self.budget_bytes = budget_bytes
        self.max_age_s = max_age_s
        self.entries: dict[str, RamEntry] = {}
        self.state = "on" if budget_bytes > 0 else "off"
        self.folder = ""

    @property
    def used_bytes(self) -> int:
        return sum(e.n_bytes for e in list(self.entries.values()))  # a copy: read unlocked by /metrics (disk.py)

    def add(self, entry: RamEntry) -> None:
        self.entries[entry.key] = entry

    def forget(self, key: str) -> RamEntry | None:
        return self.entries.pop(key, None)

    def read_pieces(self, entry: RamEntry) -> Iterator[bytes]:
        yield from entry.pieces
