"""The policies `strata replay` compares, by name. Those of `slot_policy` (lru, expire:S, shortest,
affinity, default) and of `slot_returns` (learned, learned+protect) run the real pure functions
through `SlotView`s; lcp-lru, gds, gds+expire:S and
the offline `oracle` are written here. Each has `reset(slots, requests, opts)`,
`choose(i, now, commons) -> (slot index, source index | None, reason)` and `served(slot, i, end)`.

Not here: the simulation loop (simulator.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .. import slot_policy as sp
from .. import slot_returns as sr
from . import optimum
from .timeline import Request, common_prefix

POLICY_NAMES = ("lru", "lcp-lru", "expire:S", "shortest", "gds", "gds+expire:S", "affinity", "default", "learned",
                "learned+protect", "oracle", "oracle-belady", "oracle-opt")
NEVER_S = 1e18  # an expiry that never comes: `shortest`
LCP_SIMILARITY = 0.10  # llama.cpp server's --slot-prompt-similarity default


class Policy:
    name = "?"

    def reset(self, slots, requests: Sequence[Request], opts) -> None:
        self.slots = slots
        self.requests = requests
        self.opts = opts

    def served(self, slot: int, i: int, end: float) -> None:
        pass

    # shared first steps: the request's own prefix (seed 001's rule), then a blank slot
    def own_or_blank(self, i: int, now: float, commons: list[int]) -> tuple[int, str] | None:
        best = max(commons)
        cfg = sp.PolicyConfig()
        tol = sp.near_match_tolerance(best, self.opts.prompt_rate_tps, cfg)
        own = -1
        for s in self.slots:
            if s.busy_until > now or s.blank:
                continue
            c = commons[s.index]
            if c > 0 and s.n_tokens - c <= tol and c >= cfg.own_min_share * s.n_tokens \
                    and (own < 0 or c > commons[own]):
                own = s.index
        if own >= 0:
            return own, "own_prefix"
        for s in self.slots:
            if s.blank and s.busy_until <= now:
                return s.index, "empty"
        return None

    def idle(self, now: float):
        return [s for s in self.slots if s.busy_until <= now]


def slot_views(slots, now: float, commons: list[int], turns: dict[int, int] | None = None):
    """The simulated slots as the pure policy's SlotViews (1-based ids; `turns`: the turn of the
    request each history came from, for the learned policy), and the busy slots per group."""
    load: dict[int, int] = {}
    views = []
    for s in slots:
        busy = s.busy_until > now
        if busy:
            load[s.group] = load.get(s.group, 0) + 1
        turn = turns.get(s.req, 0) if turns is not None and s.req is not None else 0
        blank = s.blank or s.superseded     # a superseded copy: worth nothing (seed 000), still matched
        views.append(sp.SlotView(s.index + 1, s.group, s.n_tokens, commons[s.index], s.last_use, busy, blank, turn))
    return views, load


def as_choice(d: sp.Decision) -> tuple[int, int | None, str]:
    """A policy Decision as the simulator's (slot index, source index | None, reason)."""
    assert d.slot is not None, "the simulator calls a policy only with an idle slot"
    return d.slot - 1, (d.source_slot - 1 if d.source_slot is not None else None), d.reason


class PurePolicy(Policy):
    """slot_policy.pick_slot (`affinity`: slot_policy.place) on SlotViews."""

    def __init__(self, name: str, cfg: sp.PolicyConfig, always_place: bool = False) -> None:
        self.name = name
        self.cfg = cfg
        self.always_place = always_place  # `affinity`: seed 000's place() whatever the groups

    def choose(self, i, now, commons):
        views, load = slot_views(self.slots, now, commons)
        req = sp.RequestView(self.requests[i].n_prompt, self.opts.prompt_rate_tps)
        if self.always_place:
            return as_choice(sp.place(views, req, now, self.cfg, load))
        return as_choice(sp.pick_slot(views, req, now, self.cfg, load))


class LearnedPolicy(Policy):
    """slot_returns.place_learned on SlotViews; this policy owns the learned statistics: a history
    is noted when a request is served, a return when a request first continues an earlier one (the
    timeline's parent, which an online server sees as the prefix it matched)."""

    def __init__(self, name: str, cfg: sp.PolicyConfig) -> None:
        self.name = name
        self.cfg = cfg

    def reset(self, slots, requests, opts):
        super().reset(slots, requests, opts)
        self.stats = sr.ReturnStats()
        self.turn: dict[int, int] = {}
        self.end: dict[int, float] = {}
        self.continued: set[int] = set()

    def choose(self, i, now, commons):
        p = self.requests[i].parent
        if p is not None and p in self.end and p not in self.continued:
            self.continued.add(p)
            hp = self.requests[p]
            self.stats = sr.note_return(self.stats, self.turn[p], hp.n_prompt + hp.n_output, now - self.end[p])
        views, load = slot_views(self.slots, now, commons, self.turn)
        req = sp.RequestView(self.requests[i].n_prompt, self.opts.prompt_rate_tps)
        return as_choice(sr.pick_slot_learned(views, req, now, self.cfg, self.stats, load))

    def served(self, slot, i, end):
        r = self.requests[i]
        p = r.parent
        self.turn[i] = self.turn.get(p, 0) + 1 if p is not None else 1
        self.end[i] = end
        self.stats = sr.note_history(self.stats, self.turn[i], r.n_prompt + r.n_output)


class LcpLru(Policy):
    """llama.cpp's server: the best prefix match above 10% of the prompt, else least recently used
    (never-used slots first)."""

    name = "lcp-lru"

    def choose(self, i, now, commons):
        idle = self.idle(now)
        n = self.requests[i].n_prompt
        best = max(idle, key=lambda s: (commons[s.index], -s.index))
        if commons[best.index] > LCP_SIMILARITY * n:
            return best.index, None, "lcp"
        t = min(idle, key=lambda s: (not s.blank, s.last_use, s.index))
        return t.index, None, "lru"


class GreedyDualSize(Policy):
    """GreedyDual-Size (Cao and Irani 1997) over whole slots: H = L + cost, cost = the history's
    tokens (what a miss re-reads), size = one slot; evict the lowest H and raise L to it. With
    `expire_s`: a slot idle that long goes first (least recently used among them)."""

    def __init__(self, expire_s: float = 0.0) -> None:
        self.expire_s = expire_s
        self.name = f"gds+expire:{expire_s:g}" if expire_s > 0 else "gds"

    def reset(self, slots, requests, opts):
        super().reset(slots, requests, opts)
        self.h = [0.0] * len(slots)
        self.inflation = 0.0

    def choose(self, i, now, commons):
        first = self.own_or_blank(i, now, commons)
        if first is not None:
            return first[0], None, first[1]
        idle = self.idle(now)
        if self.expire_s > 0:
            expired = [s for s in idle if now - s.last_use >= self.expire_s]
            if expired:
                t = min(expired, key=lambda s: (s.last_use, s.index))
                self.inflation = max(self.inflation, self.h[t.index])
                return t.index, None, "expired_lru"
        t = min(idle, key=lambda s: (self.h[s.index], s.last_use, s.index))
        self.inflation = max(self.inflation, self.h[t.index])
        return t.index, None, "gds"

    def served(self, slot, i, end):
        self.h[slot] = self.inflation + self.slots[slot].n_tokens


class Oracle(Policy):
    """Offline yardstick: knows when each history is next continued (a later request whose parent
    is the request it holds) and how many tokens that turn would reuse. Own prefix, a blank slot,
    else evict the idle slot whose history is never continued, else the lowest reuse per second of
    waiting (`cost`, weighted caching) or the farthest next use (`belady`). `strata replay` reports
    the better of the two per timeline as `oracle`. Not a policy to serve."""

    def __init__(self, rule: str = "cost") -> None:
        self.rule = rule
        self.name = "oracle" if rule == "cost" else f"oracle-{rule}"

    def reset(self, slots, requests, opts):
        super().reset(slots, requests, opts)
        self.children: dict[int, tuple[list[float], list[int]]] = {}
        for r in requests:
            if r.parent is not None:
                p = requests[r.parent]
                reuse = common_prefix(r.ids, r.lens, p.ids + (p.out_id,), p.lens + (p.n_output,))
                times, reuses = self.children.setdefault(r.parent, ([], []))
                times.append(r.time)
                reuses.append(reuse)

    def next_use(self, s, now: float) -> tuple[float, int]:
        kids = self.children.get(s.req) if s.req is not None else None
        if not kids:
            return float("inf"), 0
        k = bisect.bisect_right(kids[0], now)
        return (kids[0][k], kids[1][k]) if k < len(kids[0]) else (float("inf"), 0)

    def choose(self, i, now, commons):
        first = self.own_or_blank(i, now, commons)
        if first is not None:
            return first[0], None, first[1]
        best, best_key = None, None
        for s in self.idle(now):
            when, reuse = self.next_use(s, now)
            if self.rule == "belady":
                key = (-when, s.n_tokens, s.last_use, s.index)
            else:
                key = (reuse / max(when - now, 1e-3) if when != float("inf") else -1.0, s.last_use, s.index)
            if best_key is None or key < best_key:
                best, best_key = s, key
        return best.index, None, "oracle_" + self.rule


class OptimumPolicy(Policy):
    """`oracle-opt`: the exact optimum of parent reuse (optimum.py) played through the simulator. A
    history is needed while the optimum keeps it for a later child; a request runs in the idle slot
    not needed that shares the most with it (its parent's, when the optimum lets that go now), and
    copies from the slot that shares the most. Instant service only (no rates): the optimum's model."""

    name = "oracle-opt"

    def reset(self, slots, requests, opts):
        super().reset(slots, requests, opts)
        if opts.prefill_tps > 0 or opts.decode_tps > 0:
            raise ValueError("oracle-opt: the optimum is exact for instant service only (no --prefill-tps/--decode-tps)")
        self.optimum = optimum.solve(requests, len(slots))

    def choose(self, i, now, commons):
        keep = self.optimum.keep_until
        free = [s for s in self.slots if s.blank or keep.get(s.req, -1) <= i]
        t = max(free, key=lambda s: (commons[s.index], s.blank, -s.index))
        src = max(range(len(self.slots)), key=lambda k: (commons[k], -k))
        return t.index, (src if commons[src] > commons[t.index] else None), "oracle_opt"


def make_policy(name: str, n_groups: int = 1) -> Policy:
    """A policy by its command-line name (POLICY_NAMES; S in seconds)."""
    name = name.strip()
    try:
        if name == "lru":
            return PurePolicy(name, sp.PolicyConfig(expire_s=0, cache_affinity=False))
        if name == "lcp-lru":
            return LcpLru()
        if name.startswith("expire:"):
            return PurePolicy(name, sp.PolicyConfig(expire_s=_seconds(name[7:], name), cache_affinity=False))
        if name == "shortest":
            return PurePolicy(name, sp.PolicyConfig(expire_s=NEVER_S, cache_affinity=False))
        if name == "gds":
            return GreedyDualSize()
        if name.startswith("gds+expire:"):
            return GreedyDualSize(_seconds(name[11:], name))
        if name == "affinity":
            return PurePolicy(name, sp.PolicyConfig(cache_affinity=True), always_place=True)
        if name == "default":   # what `strata serve` does with default settings
            cfg = sp.PolicyConfig()
            return LearnedPolicy(name, cfg) if cfg.learn.enabled else PurePolicy(name, cfg)
        if name == "learned":
            return LearnedPolicy(name, sp.PolicyConfig(learn=sp.LearnConfig(enabled=True)))
        if name == "learned+protect":
            return LearnedPolicy(name, sp.PolicyConfig(learn=sp.LearnConfig(enabled=True, protect=True)))
        if name == "oracle":
            return Oracle("cost")
        if name == "oracle-belady":
            return Oracle("belady")
        if name == "oracle-opt":
            return OptimumPolicy()
    except ValueError as e:
        raise ValueError(f"policy {name!r}: {e}") from None
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")


def _seconds(text: str, name: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"expected seconds after ':' in {name!r}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"expected seconds > 0 in {name!r}")
    return v
