"""The system-prompt cache: the state of common prefixes (system prompt plus tools) on disk.

What this is: a DiskLevel in its own folder with its own budget (oldest deleted first when full),
holding the state of the tokens before a conversation's first message anchor, keyed by the segment
hash chain so that every conversation with the same system prompt and tools shares one file. What
this is not: the segment tier (every anchor), nor lookup ranking (policy.rank_candidates).
"""

from __future__ import annotations

from .cascade import Cascade
from .disk import DiskLevel
from .report import entries_text, files_text


class PrefixStore:
    """A single-level cascade (so budget and age work as for the levels, and it is the last level:
    it deletes) used by both the segment tier and the system-prompt cache."""

    def __init__(self, level: DiskLevel, when_full: str = "evict") -> None:
        self.level = level
        self.cascade = Cascade([level], when_full)

    @property
    def name(self) -> str:
        return self.level.name

    def describe(self) -> str:
        lvl = self.level
        if lvl.budget_bytes <= 0:
            return f"{lvl.name} off"
        # the files skipped and removed at start-up, as the conversation levels say them (their warnings and
        # /metrics did; the start-up line did not)
        what = [entries_text(len(lvl.entries)), f"{lvl.used_bytes >> 20} MiB",
                *files_text(dict(lvl.skipped), dict(lvl.removed))]
        return f"{lvl.name} {lvl.folder} {lvl.budget_bytes >> 20} MiB {lvl.state} ({', '.join(what)})"
