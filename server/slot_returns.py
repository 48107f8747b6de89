"""The learned slot policy (`STRATA_SLOT_LEARNED=1`, `strata replay` policy `learned`): an online
estimate of whether, and how soon, a held history will be continued, learned from the traffic seen
so far, and seed 000's order with the victim chosen by expected re-read cost instead of seed 000's
value (length and age only).

What is learned (`ReturnStats`, plain counts): for every history made (a request served leaves its
prompt + output in a slot), its bucket (the conversation's turn count when it was made, and its
length), and for the first continuation of a history, the gap from the end of its use to the
continuing request's arrival. Per bucket that gives q[g] = P(continued with a gap in bin g), blended
towards the length-only and the overall counts with `prior_weight` pseudo-histories each (few
samples lean on the coarser level). From q and the history's idle age: p = P(continued at all | not
yet), and the expected wait until then. The cost of giving a history up is p x its tokens not
shared with the request / the expected wait (re-read tokens per second of holding): the offline
yardstick's rule (reuse / time to the next use) with estimates in place of knowledge.

Pure: no clock, no I/O. The owner (the simulator of `strata replay`, or the server's `Placer`) keeps
the `ReturnStats`, calls `note_history` when a request is served and `note_return` when a request
continues an earlier history (the first time only), and passes the stats to `pick_slot_learned`.
The thresholds are `slot_policy.LearnConfig` (`PolicyConfig.learn`, read with the other variables).

Not here: seed 000's rules themselves (slot_policy.py), which history a request continues (the
owner knows: the simulator from the timeline's parents, the server from the prefix it matched).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import slot_policy as sp

# Buckets. Gap bins in seconds: [0,1), [1,2), [2,4), ... [4096, 8192), [8192, inf). Turn buckets by
# the conversation's turn count (1, 2, 3-4, 5-8, 9-16, 17+); length buckets by history tokens
# (1K-2K and 2K-4K apart: on the Mooncake synthetic trace histories under 2K were never continued,
# 2-4K ones 73% of the time).
GAP_EDGES_S: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
                                  2048.0, 4096.0, 8192.0)
N_GAP_BINS = len(GAP_EDGES_S)          # the last bin is open-ended
MIN_WAIT_S = 1.0                       # an expected wait shorter than this counts as this
TURN_EDGES: tuple[int, ...] = (1, 2, 3, 5, 9, 17)
LEN_EDGES: tuple[int, ...] = (0, 1_024, 2_048, 4_096, 16_384, 65_536, 131_072)
N_TURN = len(TURN_EDGES)
N_LEN = len(LEN_EDGES)
# Rows of ReturnStats: (turn, length) buckets, then length-only, then one row for everything.
N_FINE = N_TURN * N_LEN
ROW_ALL = N_FINE + N_LEN
N_ROWS = ROW_ALL + 1


# ---------------------------------------------------------------------------------------------
# The statistics (plain counts) and their updates
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ReturnStats:
    """Counts per row (N_ROWS: turn x length buckets, length-only, all). `made[r]`: histories made;
    `returned[r][g]`: of those, first continuations with a gap in bin g (shape (N_ROWS, N_GAP_BINS))."""

    made: tuple[int, ...] = (0,) * N_ROWS
    returned: tuple[tuple[int, ...], ...] = ((0,) * N_GAP_BINS,) * N_ROWS

    @property
    def histories(self) -> int:
        return self.made[ROW_ALL]


def turn_bucket(turn: int) -> int:
    """0 for turn 1 (a first turn), ... 5 for turn 17 and later; turn <= 0 (unknown) counts as 1."""
    return max(bisect.bisect_right(TURN_EDGES, max(turn, 1)) - 1, 0)


def length_bucket(n_tokens: int) -> int:
    return max(bisect.bisect_right(LEN_EDGES, n_tokens) - 1, 0)


def gap_bin(gap_s: float) -> int:
    return max(bisect.bisect_right(GAP_EDGES_S, gap_s) - 1, 0)


def rows_of(turn: int, n_tokens: int) -> tuple[int, int, int]:
    """The three rows a history counts in: its (turn, length) bucket, its length bucket, all."""
    lb = length_bucket(n_tokens)
    return turn_bucket(turn) * N_LEN + lb, N_FINE + lb, ROW_ALL


def note_history(stats: ReturnStats, turn: int, n_tokens: int) -> ReturnStats:
    """A request of its conversation's `turn` was served and left a history of n_tokens."""
    made = list(stats.made)
    for r in rows_of(turn, n_tokens):
        made[r] += 1
    return ReturnStats(tuple(made), stats.returned)


def note_return(stats: ReturnStats, turn: int, n_tokens: int, gap_s: float) -> ReturnStats:
    """A request continued (for the first time) a history made at `turn` of n_tokens, `gap_s`
    seconds after that history's last use ended."""
    g = gap_bin(max(gap_s, 0.0))
    returned = list(stats.returned)
    for r in rows_of(turn, n_tokens):
        row = list(returned[r])
        row[g] += 1
        returned[r] = tuple(row)
    return ReturnStats(stats.made, tuple(returned))


# ---------------------------------------------------------------------------------------------
# Estimates
# ---------------------------------------------------------------------------------------------

def return_shares(stats: ReturnStats, turn: int, n_tokens: int, prior_weight: float) -> list[float]:
    """q[g]: the share of such histories first continued with a gap in bin g (shape (N_GAP_BINS,)).
    Each level is its own counts plus prior_weight pseudo-histories shaped like the coarser level;
    the overall level stands alone (all zeros before any history)."""
    fine, coarse, top = rows_of(turn, n_tokens)
    q = [0.0] * N_GAP_BINS
    for r in (top, coarse, fine):
        made = stats.made[r]
        ret = stats.returned[r]
        w = prior_weight if r != top else 0.0
        denom = made + w
        if denom <= 0:
            continue
        q = [(ret[g] + w * q[g]) / denom for g in range(N_GAP_BINS)]
    return q


def cumulative(q: Sequence[float], t: float) -> float:
    """F(t) = P(continued with a gap <= t): q summed over whole bins below t, linear within its bin
    (the open last bin counts whole once t passes its start)."""
    if t <= 0:
        return 0.0
    g = gap_bin(t)
    f = sum(q[:g])
    if g + 1 < N_GAP_BINS:
        lo, hi = GAP_EDGES_S[g], GAP_EDGES_S[g + 1]
        f += q[g] * (t - lo) / (hi - lo)
    else:
        f += q[g]
    return f


def expected_wait(q: Sequence[float], age_s: float) -> tuple[float, float]:
    """(P(continued at all | idle age_s without one), E[seconds until then | continued]): each bin's
    mass at its middle (the part of age_s's own bin above age_s at the middle of that part; the open
    last bin spans its start to twice its start, or, once age_s is in it, age_s to twice age_s: an
    older history is never expected back sooner)."""
    alive = 1.0 - cumulative(q, age_s)
    if alive <= 1e-12:
        return 0.0, math.inf
    g0 = gap_bin(age_s)
    mass, wait = 0.0, 0.0
    for g in range(g0, N_GAP_BINS):
        lo = GAP_EDGES_S[g]
        hi = GAP_EDGES_S[g + 1] if g + 1 < N_GAP_BINS else 2 * max(lo, age_s)
        m = q[g]
        if g == g0:
            m *= (hi - age_s) / (hi - lo) if g + 1 < N_GAP_BINS else 1.0
            lo = max(lo, age_s)
        mass += m
        wait += m * ((lo + hi) / 2 - age_s)
    if mass <= 0:
        return 0.0, math.inf
    return min(mass / alive, 1.0), wait / mass


def expected_reread_rate(s: sp.SlotView, now: float, stats: ReturnStats, lcfg: sp.LearnConfig,
                         memo: dict | None = None) -> float:
    """Tokens per second of holding that giving this slot's history up now would cost: P(continued
    | idle so far) x its tokens not shared with the request / E[seconds until continued], the
    offline yardstick's cost rule (reuse / time to the next use) with estimates. Blank slots: 0."""
    if s.blank or s.n_tokens <= 0:
        return 0.0
    key = (turn_bucket(s.turn), length_bucket(s.n_tokens))
    q = memo.get(key) if memo is not None else None
    if q is None:
        q = return_shares(stats, s.turn, s.n_tokens, lcfg.prior_weight)
        if memo is not None:
            memo[key] = q
    p, wait = expected_wait(q, max(now - s.last_use, 0.0))
    if p <= 0:
        return 0.0
    return p * max(s.n_tokens - s.common, 0) / max(wait, MIN_WAIT_S)


# ---------------------------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------------------------

SEED_KEPT = ("own_prefix", "blank_less_loaded", "all_busy", "blank", "empty")


def place_learned(slots: Sequence[sp.SlotView], request: sp.RequestView, now: float, cfg: sp.PolicyConfig,
                  stats: ReturnStats, group_load: Mapping[int, int]) -> sp.Decision:
    """Seed 000's place() for a continued conversation and for blank slots; a new conversation that
    must give a history up gives the one of least expected re-read cost (`learned`), among the
    unprotected ones while any exists when `lcfg.protect` (seed 000's rule), with histories below
    `keep_tps` first, then group load. Before `min_histories` histories were seen: place() as is."""
    lcfg = cfg.learn
    d = sp.place(slots, request, now, cfg, group_load)
    if d.reason in SEED_KEPT or stats.histories < lcfg.min_histories:
        return d
    idle = [s for s in slots if not s.busy]
    cands = idle
    if lcfg.protect:
        cands = [s for s in idle if not sp.is_protected(s, now, cfg)] or idle
    memo: dict = {}
    costs = {s.slot: expected_reread_rate(s, now, stats, lcfg, memo) for s in cands}
    t = min(cands, key=lambda s: (costs[s.slot] >= lcfg.keep_tps, group_load.get(s.group, 0), costs[s.slot],
                                  s.last_use, s.slot))
    return sp.decide_to(t, "learned", slots, request, now, cfg)


def pick_slot_learned(slots: Sequence[sp.SlotView], request: sp.RequestView, now: float, cfg: sp.PolicyConfig,
                      stats: ReturnStats, group_load: Mapping[int, int] | None = None) -> sp.Decision:
    """`slot_policy.pick_slot` with `cfg.learn.enabled`: where it would return place(), place_learned();
    seed 001's order (one group with expire_s, or affinity off) is left as it is."""
    uses_place = cfg.cache_affinity and (cfg.expire_s <= 0 or len({s.group for s in slots}) > 1)
    if cfg.learn.enabled and uses_place:
        return place_learned(slots, request, now, cfg, stats, group_load or {})
    return sp.pick_slot(slots, request, now, cfg, group_load)
