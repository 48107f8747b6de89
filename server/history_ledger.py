"""The learned slot policy's bookkeeping in the server (`STRATA_SLOT_LEARNED=1`): which recent history
a new request continues, whether or not that history is still held (in a slot, or in main for a
request that ran on the solo path), so the statistics of server/slot_returns.py see the
continuations of overwritten histories too. (Seeing only those of
histories still held biases them: replayed that way, the histories it overwrites look as if they
never came back; benchmarks/RESULTS.md, "Learned policy (session 3)".)

Mechanism, no policy: it remembers, per history a request left in a slot, a fingerprint of its
prompt (the first and the last FINGER_TOKENS tokens and its length), its turn, and, once the slot is
overwritten, the history's length and the end of its last use. A prompt continues a remembered
history when it starts with the same FINGER_TOKENS tokens and holds the same FINGER_TOKENS tokens
just before that history's prompt length (the answer after it may be tokenized again differently).
Not here: the statistics (slot_returns.ReturnStats, owned by the Placer) or any choice of slot.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

FINGER_TOKENS = 32     # tokens compared at the start and just before the end of a history's prompt
KEEP_HISTORIES = 512   # histories remembered (the oldest forgotten first)


@dataclass
class LedgerEntry:
    """One history a request left in a slot. `slot` while it is held (its length and end are then the
    slot's); after it is overwritten `slot` is None and `n_tokens`/`end` keep what it held."""

    n_prompt: int
    head: tuple[int, ...]   # (FINGER_TOKENS,) first tokens of its prompt
    tail: tuple[int, ...]   # (<= FINGER_TOKENS,) tokens just before n_prompt
    turn: int
    slot: int | None
    n_tokens: int = 0
    end: float = 0.0
    continued: bool = False


class HistoryLedger:
    def __init__(self, keep: int = KEEP_HISTORIES) -> None:
        if keep < 1:
            raise ValueError(f"keep={keep!r}: expected >= 1")
        self.keep = keep
        self.entries: collections.OrderedDict[int, LedgerEntry] = collections.OrderedDict()
        # the same entries by their head, each head's oldest first: a request looks only at those that can
        # match (a scan of all 512 took ~40 us of the worker thread a request)
        self._by_head: dict[tuple[int, ...], dict[int, LedgerEntry]] = {}
        self.in_slot: dict[int, LedgerEntry] = {}   # slot id -> the history it holds
        self._next = 0

    def parent_of(self, prompt: list[int]) -> LedgerEntry | None:
        """The remembered history this prompt continues (the longest such, newest first), or None."""
        same_head = self._by_head.get(tuple(prompt[:FINGER_TOKENS]))
        if not same_head:
            return None
        best: LedgerEntry | None = None
        for e in reversed(same_head.values()):
            n = e.n_prompt
            if n > len(prompt) or (best is not None and n <= best.n_prompt):
                continue
            if tuple(prompt[max(n - FINGER_TOKENS, 0):n]) == e.tail:
                best = e
        return best

    def release(self, slot: int, n_tokens: int, last_use: float) -> None:
        """The slot is about to be overwritten: its history keeps the length and end it had."""
        e = self.in_slot.pop(slot, None)
        if e is not None:
            e.slot, e.n_tokens, e.end = None, n_tokens, last_use

    def move(self, src: int, dst: int) -> None:
        """The history src holds was copied into dst (a park), and src is about to be overwritten: the
        history is now dst's (release dst first)."""
        e = self.in_slot.pop(src, None)
        if e is not None:
            e.slot = dst
            self.in_slot[dst] = e

    def add(self, prompt: list[int], turn: int, slot: int) -> LedgerEntry:
        """A request of its conversation's `turn` now runs in `slot` (release the slot first)."""
        n = len(prompt)
        e = LedgerEntry(n, tuple(prompt[:FINGER_TOKENS]), tuple(prompt[max(n - FINGER_TOKENS, 0):n]), turn, slot)
        self.entries[self._next] = e
        self._by_head.setdefault(e.head, {})[self._next] = e
        self._next += 1
        self.in_slot[slot] = e
        while len(self.entries) > self.keep:
            old_id, old = self.entries.popitem(last=False)
            same_head = self._by_head[old.head]
            del same_head[old_id]
            if not same_head:
                del self._by_head[old.head]
            if old.slot is not None and self.in_slot.get(old.slot) is old:
                del self.in_slot[old.slot]
        return e

    def turn_in(self, slot: int) -> int:
        """The turn of the history the slot holds (0: not known)."""
        e = self.in_slot.get(slot)
        return e.turn if e is not None else 0
