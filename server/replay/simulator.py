"""The slot simulator of `strata replay`: requests in time order through n slots, each placed by a
policy; counts prompt tokens read and reused. Optionally a RAM conversation cache below the slots
(an overwritten history of at least `ram_min_tokens` is kept, least recently used out first, and a
request reuses the longest prefix it holds) and a time model (prefill and decode rates: a slot is
busy while it serves, a request waits when every slot is busy). Without rates every request is
served instantly, as seed 001's tables are (every request through a slot). With rates, a continued
turn is not sent before its parent's answer ends (ready = max(its time, the parent's end)).

Not here: the policies (policies.py) or any engine; tokens are segment counts (timeline.py).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import slot_policy as sp
from .timeline import Request, common_prefix


class SimSlot:
    """One simulated slot: what it holds (segments of the last request served + its output)."""

    __slots__ = ("index", "group", "ids", "lens", "n_tokens", "last_use", "busy_until", "req", "blank",
                 "conversation", "superseded", "covered")

    def __init__(self, index: int, group: int) -> None:
        self.index = index
        self.group = group
        self.ids: tuple[int, ...] = ()
        self.lens: tuple[int, ...] = ()
        self.n_tokens = 0
        self.last_use = 0.0
        self.busy_until = float("-inf")
        self.req: int | None = None  # index of the request whose history it holds
        self.blank = True  # empty: holds nothing
        self.conversation = ""
        # the server's superseded copy (SlotTable.supersede_copies): its conversation went on in another slot
        # holding at least own_min_share of it; it still matches, but the slot policy counts it as worth
        # nothing (policies.slot_views); `covered`: held whole there, so not kept in RAM again when overwritten
        self.superseded = False
        self.covered = False


@dataclass
class SimResult:
    """Totals of one replay. `prompt_tokens_read` = total - reused (slots and RAM)."""

    policy: str
    slots: int
    prompt_tokens_total: int = 0
    prompt_tokens_read: int = 0
    reused_slot: int = 0
    reused_ram: int = 0
    requests: int = 0
    waited_s: float = 0.0
    reasons: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class SimOptions:
    """`n_groups`: slot i (0-based) is in group i % n_groups. Rates 0: instant service."""

    n_groups: int = 1
    ram_cache_tokens: int = 0
    ram_min_tokens: int = 4096
    prefill_tps: float = 0.0
    decode_tps: float = 0.0
    prompt_rate_tps: float = 2000.0  # what policies are told for near matches

    def __post_init__(self) -> None:
        if self.n_groups < 1:
            raise ValueError(f"--groups {self.n_groups}: expected >= 1")
        for name, flag in (("ram_cache_tokens", "--ram-cache-tokens"), ("ram_min_tokens", "--ram-min-tokens"),
                           ("prefill_tps", "--prefill-tps"), ("decode_tps", "--decode-tps"),
                           ("prompt_rate_tps", "--prompt-rate")):
            value = getattr(self, name)
            # named by the flag that sets it (strata replay's user typed that); NaN passed `< 0` and inf
            # `> 0`: `--decode-tps nan` replayed as if timed and printed a table as valid as any
            if not math.isfinite(value):
                raise ValueError(f"{flag} {value!r}: expected a finite number >= 0")
            if value < 0:
                raise ValueError(f"{flag} {value!r}: expected >= 0")


class RamCache:
    """Histories overwritten in slots, by last use; a token budget; least recently used out first."""

    def __init__(self, budget: int, min_tokens: int) -> None:
        self.budget = budget
        self.min_tokens = min_tokens
        self.entries: dict[int, list] = {}  # key -> [ids, lens, n, last_use], insertion = LRU order
        self.used = 0
        self._key = 0

    def admit(self, ids: tuple[int, ...], lens: tuple[int, ...], n: int, now: float) -> None:
        if n < self.min_tokens or n > self.budget:
            return
        for k, e in list(self.entries.items()):  # an entry this one extends is superseded
            if common_prefix(ids, lens, e[0], e[1]) >= e[2]:
                self.used -= e[2]
                del self.entries[k]
        self._key += 1
        self.entries[self._key] = [ids, lens, n, now]
        self.used += n
        while self.used > self.budget:
            k = next(iter(self.entries))
            self.used -= self.entries.pop(k)[2]

    def best(self, ids: tuple[int, ...], lens: tuple[int, ...], now: float) -> int:
        best, best_k = 0, None
        for k, e in self.entries.items():
            c = common_prefix(ids, lens, e[0], e[1])
            if c > best:
                best, best_k = c, k
        if best_k is not None:  # used: most recent again
            e = self.entries.pop(best_k)
            e[3] = now
            self.entries[best_k] = e
        return best


def supersede_copies(slots: Sequence[SimSlot], keep: int, conversation: str, commons: list[int],
                     now: float) -> None:
    """As the server does (SlotTable.supersede_copies): the conversation went on in slot `keep`; its idle copies
    in other slots that the prompt holds (`commons`: at least own_min_share of each) are superseded, `covered`
    where held whole."""
    share = sp.PolicyConfig().own_min_share
    for o in slots:
        if (o.index != keep and not o.blank and o.busy_until <= now and o.conversation == conversation
                and commons[o.index] >= share * o.n_tokens):
            o.superseded = True
            o.covered = commons[o.index] >= o.n_tokens - 1


def kept_elsewhere(slots: Sequence[SimSlot], s: SimSlot) -> bool:
    """A covered copy that another slot still holds whole (as the server's parking.kept_elsewhere, without the
    cache's budget): overwritten without going to RAM."""
    return s.covered and any(o is not s and not o.blank
                             and common_prefix(s.ids, s.lens, o.ids, o.lens) >= s.n_tokens - 1 for o in slots)


def simulate(requests: Sequence[Request], n_slots: int, policy, opts: SimOptions | None = None) -> SimResult:
    """Replay `requests` (time order) through `n_slots` slots under `policy` (policies.Policy)."""
    if n_slots < 1:
        raise ValueError(f"--slots {n_slots}: expected >= 1")
    opts = opts or SimOptions()
    slots = [SimSlot(i, i % opts.n_groups) for i in range(n_slots)]
    ram = RamCache(opts.ram_cache_tokens, opts.ram_min_tokens) if opts.ram_cache_tokens > 0 else None
    policy.reset(slots, requests, opts)
    res = SimResult(policy.name, n_slots)
    timed = opts.prefill_tps > 0 or opts.decode_tps > 0
    # Event order: (ready time, index). A continued turn is ready no earlier than its parent's end (a
    # client sends its next turn after the answer), so it is queued when its parent is placed.
    waiting: dict[int, list[int]] = {}
    heap: list[tuple[float, int]] = []
    for i, r in enumerate(requests):
        if r.parent is None or r.parent >= i:
            heap.append((r.time, i))
        else:
            waiting.setdefault(r.parent, []).append(i)
    heapq.heapify(heap)
    while heap:
        now, i = heapq.heappop(heap)
        r = requests[i]
        if timed:
            free_at = min(s.busy_until for s in slots)
            if free_at > now:
                res.waited_s += free_at - now
                heapq.heappush(heap, (free_at, i))
                continue
        rid, rlen = r.ids, r.lens
        commons = [0 if s.blank else common_prefix(rid, rlen, s.ids, s.lens) for s in slots]
        t, src, reason = policy.choose(i, now, commons)
        s = slots[t]
        reused = commons[t]
        if src is not None:
            reused = max(reused, commons[src])
        from_ram = 0
        if ram is not None:
            from_ram = max(ram.best(rid, rlen, now) - reused, 0)
            if not s.blank and commons[t] < s.n_tokens and not kept_elsewhere(slots, s):
                ram.admit(s.ids, s.lens, s.n_tokens, now)
        reused = min(reused, r.n_prompt)
        from_ram = min(from_ram, r.n_prompt - reused)
        read = r.n_prompt - reused - from_ram
        res.requests += 1
        res.prompt_tokens_total += r.n_prompt
        res.prompt_tokens_read += read
        res.reused_slot += reused
        res.reused_ram += from_ram
        res.reasons[reason] += 1
        end = now
        if opts.prefill_tps > 0:
            end += read / opts.prefill_tps
        if opts.decode_tps > 0:
            end += r.n_output / opts.decode_tps
        s.ids = rid + (r.out_id,)
        s.lens = rlen + (r.n_output,)
        s.n_tokens = r.n_prompt + r.n_output
        s.last_use = end
        s.busy_until = end if timed else float("-inf")
        s.req = i
        s.blank = False
        s.conversation = r.conversation
        s.superseded = s.covered = False
        supersede_copies(slots, t, r.conversation, commons, now)
        policy.served(t, i, end)
        for child in waiting.pop(i, ()):
            heapq.heappush(heap, (max(requests[child].time, end), child))
    return res
