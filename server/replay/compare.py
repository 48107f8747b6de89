"""Side by side with the yardstick: replay a timeline under one policy and, at each of its decisions
that gives a history up, ask the offline yardstick (`oracle`, the cost rule) which history it would
give up from the same slots. Where the two differ, record what each victim would have been worth: when
the history is next continued and how many tokens that turn would reuse. That shows what information
the yardstick exploits (whether a history comes back at all, or only when).

Not here: the simulation (simulator.py), the policies (policies.py), any printing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .policies import Oracle, Policy, make_policy
from .simulator import SimOptions, SimResult, simulate
from .timeline import Request

# Reasons where the policy gave no history up (its own prefix, a blank slot): not compared.
KEEPING = frozenset({"own_prefix", "empty", "blank", "blank_less_loaded"})
WHEN_EDGES_S: tuple[float, ...] = (60.0, 300.0)  # next use classes: < 60 s, < 300 s, later, never


@dataclass(frozen=True, slots=True)
class Victim:
    """A history one rule would give up: its slot (0-based), tokens, idle age, and its true next use."""

    slot: int
    n_tokens: int
    age_s: float
    next_s: float   # seconds until it is next continued (inf: never)
    reuse: int      # tokens that continuation would reuse from it


@dataclass
class Comparison:
    """`result`: the policy's own replay. `differ`: (request index, reason, policy's victim, the
    yardstick's victim) where they chose differently. `agree`: decisions where they chose the same."""

    result: SimResult
    agree: int = 0
    differ: list[tuple[int, str, Victim, Victim]] = field(default_factory=list)

    def classes(self) -> tuple[Counter, Counter]:
        """(count, tokens the policy's victim would have reused) per (reason, policy's victim's next
        use class, the yardstick's victim's next use class)."""
        count: Counter = Counter()
        tokens: Counter = Counter()
        for _, reason, mine, theirs in self.differ:
            key = (reason, when_class(mine.next_s), when_class(theirs.next_s))
            count[key] += 1
            tokens[key] += mine.reuse
        return count, tokens


def when_class(next_s: float) -> str:
    if next_s == math.inf:
        return "never"
    for edge in WHEN_EDGES_S:
        if next_s < edge:
            return f"<{edge:g}s"
    return f">={WHEN_EDGES_S[-1]:g}s"


class _SideBySide(Policy):
    """Runs `inner` (its choices are applied) and asks the yardstick at each of inner's evictions."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.oracle = Oracle("cost")
        self.agree = 0
        self.differ: list[tuple[int, str, Victim, Victim]] = []

    def reset(self, slots, requests, opts) -> None:
        super().reset(slots, requests, opts)
        self.inner.reset(slots, requests, opts)
        self.oracle.reset(slots, requests, opts)

    def served(self, slot: int, i: int, end: float) -> None:
        self.inner.served(slot, i, end)

    def victim(self, k: int, now: float) -> Victim:
        s = self.slots[k]
        when, reuse = self.oracle.next_use(s, now)
        return Victim(k, s.n_tokens, now - s.last_use, when - now, reuse)

    def choose(self, i, now, commons):
        mine = self.inner.choose(i, now, commons)
        if mine[2] in KEEPING:
            return mine
        theirs = self.oracle.choose(i, now, commons)
        if theirs[0] == mine[0]:
            self.agree += 1
        else:
            self.differ.append((i, mine[2], self.victim(mine[0], now), self.victim(theirs[0], now)))
        return mine


def compare(requests: Sequence[Request], n_slots: int, policy: str = "default",
            opts: SimOptions | None = None) -> Comparison:
    """Replay `requests` through n_slots under `policy`, compared decision by decision with the yardstick."""
    side = _SideBySide(make_policy(policy, (opts or SimOptions()).n_groups))
    res = simulate(requests, n_slots, side, opts)
    return Comparison(res, side.agree, side.differ)
