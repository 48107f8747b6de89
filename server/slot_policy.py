"""Slot placement policy: which batch slot a request runs in, which history it gives up, where the
solo path's conversation is parked. Seeds 000 (groups, `STRATA_SLOT_CACHE_AFFINITY`) and 001
(plain `--batch`, `STRATA_SLOT_EXPIRE_S`).

Pure: frozen dataclasses in, a decision with a `reason` out. No I/O, no logging, no clock (`now` is
passed in, seconds on any monotonic scale shared with `last_use`), no randomness, no engine. The
scheduler computes every slot's common prefix with the prompt and applies the decision (copy,
truncate, prefill, park); it logs `reason`.

Interface (the contract with the scheduler and `strata replay`):
- `PolicyConfig.from_env(environ)`: every `STRATA_SLOT_*` variable, read once, validated.
- `pick_slot(slots, request, now, cfg, group_load=None) -> Decision`: the entry point. With
  `cfg.cache_affinity` (default) it returns `place(...)`, except for one group with `expire_s` set,
  which keeps seed 001's order; affinity off: seed 001's order (expire_s, else LRU).
- `place(slots, request, now, cfg, group_load) -> Decision`: pipelined groups (seed 000).
- `reclaim_slot(slots, now, cfg, group_load, ...) -> (SlotView | None, reason)`: the shared order
  in which a new conversation or a park takes a slot.
- `plan_park(main, slots, now, cfg, group_load) -> ParkDecision`: where the solo path's
  conversation goes when a request displaces it (or why it does not).
- `protection_s(n, cfg)`, `retention(n, age, cfg)`, `value(n, age, cfg)`, `overwrite_score(...)`.
- `LearnConfig` (`PolicyConfig.learn`, the `STRATA_SLOT_LEARN*` variables) and `decide_to(...)`: for
  the learned policy of slot_returns.py, which reuses place() and only replaces its victim.

Not here: the slot table, the engine calls, the trace records, the conversation cache below slots.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

# ---------------------------------------------------------------------------------------------
# Seed constants (shapes of the curves; the scales are PolicyConfig parameters)
# ---------------------------------------------------------------------------------------------

# Protection by history length at STRATA_SLOT_TTL_MAX_S = 120 (seed 000); piecewise linear, from
# 0 s at 0 tokens, flat past the last point. The whole curve scales with ttl_max_s / 120.
PROTECTION_POINTS: tuple[tuple[int, float], ...] = (
    (0, 0.0), (500, 0.1), (2_000, 2.0), (8_000, 10.0), (32_000, 45.0),
    (50_000, 65.0), (100_000, 90.0), (262_144, 120.0),
)
PROTECTION_CURVE_MAX_S = 120.0
_PROTECTION_XS = tuple(n for n, _ in PROTECTION_POINTS)
RETENTION_REF_TOKENS = 50_000     # a fresh history of this length is worth about 1
RETENTION_EXPONENT = 0.7
RETENTION_KNEE_TOKENS = 2_000     # (n / (n + knee))^2 discounts short histories
RETENTION_EXPIRED_FLOOR = 0.25    # 0.25 + 0.75 x freshness


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

def env_values(environ: Mapping[str, str], names: Mapping[str, str], *, flags: Sequence[str] = (),
               whole: Mapping[str, str] | None = None) -> dict[str, object]:
    """The variables of `names` (field -> variable) that are set, parsed: `flags` as 0/1 words, the rest
    as finite numbers >= 0, `whole` ones (field -> what they count, for the message) as integers.
    Unset or empty: left out (the default). ValueError names the variable and the value."""
    out: dict[str, object] = {}
    for name, var in names.items():
        raw = environ.get(var)
        if raw is None or raw.strip() == "":
            continue
        text = raw.strip().lower()
        if name in flags:
            if text in ("1", "true", "yes", "on"):
                out[name] = True
            elif text in ("0", "false", "no", "off"):
                out[name] = False
            else:
                raise ValueError(f"{var}={raw!r}: expected 0 or 1")
            continue
        try:
            num = float(text)
        except ValueError:
            raise ValueError(f"{var}={raw!r}: not a number") from None
        if not math.isfinite(num) or num < 0:
            raise ValueError(f"{var}={raw!r}: expected a finite number >= 0")
        if whole is not None and name in whole:
            if num != int(num):
                raise ValueError(f"{var}={raw!r}: expected a whole number{whole[name]}")
            num = int(num)
        out[name] = num
    return out


def check_value(var: str, value: object, *, flag: bool) -> None:
    """A field's value as env_values gives it: a flag a bool, anything else a finite number >= 0 (a bool is not
    one). ValueError names the variable and the value."""
    if flag:
        if not isinstance(value, bool):
            raise ValueError(f"{var}={value!r}: expected 0 or 1")
    elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{var}={value!r}: expected a finite number >= 0")


@dataclass(frozen=True)
class LearnConfig:
    """Thresholds of the learned policy, each a `STRATA_SLOT_LEARN*` variable (`from_env`)."""

    # STRATA_SLOT_LEARNED: the learned choice of the history to give up, in seed 000's place(). On by
    # default: replayed, it reads less than place() alone in 60 of 64 cells (3-12 points on agent
    # timelines), at most 1.1 points more in 4 (Mooncake synthetic trace), and no thinned draw reads
    # more than LRU (place() alone: four do); benchmarks/RESULTS.md, "Learned policy (session 3)".
    enabled: bool = True
    prior_weight: float = 20.0       # STRATA_SLOT_LEARN_PRIOR_WEIGHT: pseudo-histories from the coarser level
    min_histories: int = 50          # STRATA_SLOT_LEARN_MIN_HISTORIES: fewer seen: seed 000's place() as is
    # STRATA_SLOT_LEARN_PROTECT: seed 000's protection by length also binds the learned choice. Off by
    # default: replayed, it cost up to 5.2 points on the Mooncake traces and never helped by more than
    # 0.2 on agent timelines (benchmarks/RESULTS.md, "Learned policy (session 3)").
    protect: bool = False
    keep_tps: float = 1.0            # STRATA_SLOT_LEARN_KEEP_TPS: a history whose expected re-read is below
                                     # this many tokens per second is not worth keeping (taken before group load)

    def __post_init__(self) -> None:
        for f in fields(self):
            check_value(LEARN_ENV_NAMES[f.name], getattr(self, f.name), flag=f.name in ("enabled", "protect"))
        if self.min_histories != int(self.min_histories):
            raise ValueError(f"STRATA_SLOT_LEARN_MIN_HISTORIES={self.min_histories!r}: expected a whole number")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LearnConfig:
        """Read each variable once; unset or empty keeps the default; a bad value raises ValueError
        naming the variable and the value."""
        kwargs = env_values(environ, LEARN_ENV_NAMES, flags=("enabled", "protect"), whole={"min_histories": ""})
        return cls(**kwargs)


LEARN_ENV_NAMES: dict[str, str] = {
    "enabled": "STRATA_SLOT_LEARNED",
    "prior_weight": "STRATA_SLOT_LEARN_PRIOR_WEIGHT",
    "min_histories": "STRATA_SLOT_LEARN_MIN_HISTORIES",
    "protect": "STRATA_SLOT_LEARN_PROTECT",
    "keep_tps": "STRATA_SLOT_LEARN_KEEP_TPS",
}


@dataclass(frozen=True)
class PolicyConfig:
    """Every threshold of seeds 000 and 001, with the seed's default. `from_env` names the variables."""

    expire_s: float = 0.0              # STRATA_SLOT_EXPIRE_S: seed 001's order for one group; 0 = off
    # STRATA_SLOT_CACHE_AFFINITY: place() (seed 000). On by default, also for one group (the seed has
    # it opt-in for pipelined groups only): replayed, it reads fewer tokens than LRU and expire:600 on
    # agent timelines and than LRU on every Mooncake draw (docs/slot-policy.md, benchmarks/RESULTS.md).
    cache_affinity: bool = True
    ttl_max_s: float = 120.0           # STRATA_SLOT_TTL_MAX_S: protection at 262144 tokens
    expired_keep_score: float = 0.01   # STRATA_SLOT_EXPIRED_KEEP_SCORE
    idle_value_zero_s: float = 1800.0  # STRATA_SLOT_IDLE_VALUE_ZERO_S: 0 disables decay
    park_value_ratio: float = 2.0      # STRATA_SLOT_PARK_VALUE_RATIO: 0 = never take one worth keeping
    park_min_value: float = 0.01       # STRATA_SLOT_PARK_MIN_VALUE
    park_kept_share: float = 0.98      # STRATA_SLOT_PARK_KEPT_SHARE
    near_match_share: float = 0.02     # STRATA_SLOT_NEAR_MATCH_SHARE: of the best match
    near_match_s: float = 1.0          # STRATA_SLOT_NEAR_MATCH_S: seconds of the prompt rate
    near_match_tokens: int = 4096      # STRATA_SLOT_NEAR_MATCH_TOKENS: cap
    loss_tie_share: float = 0.10       # STRATA_SLOT_LOSS_TIE_SHARE: no-wait losses this close go by group load
    own_min_share: float = 0.5         # STRATA_SLOT_OWN_MIN_SHARE: a slot is the request's own only when
                                       # at least this share of its history is the prompt's prefix
    # An editor's code completions (server/editor_place.py). STRATA_SLOT_EDITOR_HOLD_S: seconds after the editor's
    # last completion arrived during which an agent's request does not take the context holding its file while
    # another slot is idle (the agent's history given up goes to the conversation cache; the editor's is lost,
    # and its next keystroke reads the file again in slices beside the agents). 3 s: the scheduler's
    # EDITOR_ACTIVE_S, a keystroke's every 1-2 s. 0: off.
    editor_hold_s: float = 3.0
    # STRATA_SLOT_EDITOR_MAIN: a completion that finds no slot idle runs in main when main is idle, and goes back
    # to the context holding the most of its file (main included). Off: it waited for an agent's turn to end
    # (four agents reading on --batch 4's four slots: every keystroke queued past the editor's time-out).
    editor_main: bool = True
    learn: LearnConfig = LearnConfig()  # STRATA_SLOT_LEARN*: the learned policy (slot_returns.py)

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "learn":
                if not isinstance(v, LearnConfig):
                    raise ValueError(f"learn={v!r}: expected a LearnConfig")
                continue
            check_value(ENV_NAMES[f.name], v, flag=f.name in ("cache_affinity", "editor_main"))
        if self.ttl_max_s <= 0:
            raise ValueError(f"STRATA_SLOT_TTL_MAX_S={self.ttl_max_s!r}: expected a number > 0")
        if not 0 < self.park_kept_share <= 1:
            raise ValueError(f"STRATA_SLOT_PARK_KEPT_SHARE={self.park_kept_share!r}: expected 0 < share <= 1")
        if self.own_min_share > 1:
            raise ValueError(f"STRATA_SLOT_OWN_MIN_SHARE={self.own_min_share!r}: expected 0 <= share <= 1")
        if self.near_match_share > 1:
            raise ValueError(f"STRATA_SLOT_NEAR_MATCH_SHARE={self.near_match_share!r}: expected 0 <= share <= 1")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> PolicyConfig:
        """Read each `STRATA_SLOT_*` variable once; unset or empty keeps the default.

        Raises ValueError naming the variable and its value for anything not a valid number."""
        kwargs = env_values(environ, ENV_NAMES, flags=("cache_affinity", "editor_main"), whole={"near_match_tokens": " of tokens"})
        kwargs["learn"] = LearnConfig.from_env(environ)
        return cls(**kwargs)  # __post_init__ validates ranges, naming the variable


ENV_NAMES: dict[str, str] = {
    "expire_s": "STRATA_SLOT_EXPIRE_S",
    "cache_affinity": "STRATA_SLOT_CACHE_AFFINITY",
    "ttl_max_s": "STRATA_SLOT_TTL_MAX_S",
    "expired_keep_score": "STRATA_SLOT_EXPIRED_KEEP_SCORE",
    "idle_value_zero_s": "STRATA_SLOT_IDLE_VALUE_ZERO_S",
    "park_value_ratio": "STRATA_SLOT_PARK_VALUE_RATIO",
    "park_min_value": "STRATA_SLOT_PARK_MIN_VALUE",
    "park_kept_share": "STRATA_SLOT_PARK_KEPT_SHARE",
    "near_match_share": "STRATA_SLOT_NEAR_MATCH_SHARE",
    "near_match_s": "STRATA_SLOT_NEAR_MATCH_S",
    "near_match_tokens": "STRATA_SLOT_NEAR_MATCH_TOKENS",
    "loss_tie_share": "STRATA_SLOT_LOSS_TIE_SHARE",
    "own_min_share": "STRATA_SLOT_OWN_MIN_SHARE",
    "editor_hold_s": "STRATA_SLOT_EDITOR_HOLD_S",
    "editor_main": "STRATA_SLOT_EDITOR_MAIN",
}


# ---------------------------------------------------------------------------------------------
# Plain data crossing the boundary
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SlotView:
    """One slot as the policy sees it. `common`: tokens its history shares with the request's prompt
    (for plan_park: with the solo conversation's history). `last_use`: end of its last actual use
    (a park keeps the parked history's). `blank`: empty, invalid, or a superseded copy. `turn`: the
    turn of its conversation that made the history (0: unknown; only the learned policy reads it).
    `completion`: it holds an editor's code completion (editor_place.py)."""

    slot: int
    group: int = 0
    n_tokens: int = 0
    common: int = 0
    last_use: float = 0.0
    busy: bool = False
    blank: bool = False
    turn: int = 0
    completion: bool = False


@dataclass(frozen=True, slots=True)
class RequestView:
    """The request: its prompt length and the prompt-reading rate (tokens/s) for near matches; whether it is an
    editor's code completion, and the seconds since the editor's last completion arrived (editor_place.py)."""

    n_prompt: int
    prompt_rate_tps: float = 0.0
    completion: bool = False
    editor_age_s: float = math.inf


@dataclass(frozen=True, slots=True)
class MainView:
    """The solo path's conversation: history length and the end of its last actual use."""

    n_tokens: int
    last_use: float


@dataclass(frozen=True, slots=True)
class Decision:
    """Where a request runs. `reused`: prompt tokens it need not read (from `slot`, or copied from
    `source_slot` when that is set). `lost_tokens`/`loss`: the history given up and its value."""

    slot: int | None
    reason: str
    reused: int = 0
    source_slot: int | None = None
    group: int | None = None
    lost_tokens: int = 0
    loss: float = 0.0


@dataclass(frozen=True, slots=True)
class ParkDecision:
    """Where the solo conversation is parked (`slot`), or `slot=None` with `park_skip` saying why.
    `last_use` is the parked history's own (a park never renews protection or idle age)."""

    slot: int | None
    reason: str
    park_skip: str | None = None
    reused: int = 0
    last_use: float | None = None
    lost_tokens: int = 0


# ---------------------------------------------------------------------------------------------
# Protection, retention, value (seed 000)
# ---------------------------------------------------------------------------------------------

def protection_s(n_tokens: int, cfg: PolicyConfig) -> float:
    """Seconds a history of n_tokens is protected after its last use (piecewise linear)."""
    scale = cfg.ttl_max_s / PROTECTION_CURVE_MAX_S
    if n_tokens <= 0:
        return 0.0
    k = bisect.bisect_left(_PROTECTION_XS, n_tokens)
    if k >= len(_PROTECTION_XS):
        return scale * PROTECTION_POINTS[-1][1]
    (n0, s0), (n1, s1) = PROTECTION_POINTS[k - 1], PROTECTION_POINTS[k]
    return scale * (s0 + (s1 - s0) * (n_tokens - n0) / (n1 - n0))


def base_worth(n_tokens: int) -> float:
    """(n / 50000)^0.7 x (n / (n + 2000))^2: a fresh history's retention before freshness."""
    if n_tokens <= 0:
        return 0.0
    n = float(n_tokens)
    return (n / RETENTION_REF_TOKENS) ** RETENTION_EXPONENT * (n / (n + RETENTION_KNEE_TOKENS)) ** 2


def retention(n_tokens: int, age_s: float, cfg: PolicyConfig) -> float:
    """base x (0.25 + 0.75 x freshness), freshness = 1 - age / TTL, 0 once expired."""
    ttl = protection_s(n_tokens, cfg)
    fresh = 1.0 - age_s / ttl if ttl > 0 and age_s < ttl else 0.0
    return base_worth(n_tokens) * (RETENTION_EXPIRED_FLOOR + (1.0 - RETENTION_EXPIRED_FLOOR) * max(fresh, 0.0))


def overwrite_score(n_tokens: int, age_s: float, cfg: PolicyConfig) -> float:
    """1 / (1 + retention): higher is cheaper to overwrite."""
    return 1.0 / (1.0 + retention(n_tokens, age_s, cfg))


def value(n_tokens: int, age_s: float, cfg: PolicyConfig) -> float:
    """What keeping the history is worth now. Protected: its retention. Expired: base x 0.25 x
    (1 - x^2), x = clamp((age - TTL) / (idle_value_zero_s - TTL), 0, 1); a limit shorter than the TTL
    makes it 0 once protection ends; idle_value_zero_s = 0: no decay. Age counts from last use."""
    ttl = protection_s(n_tokens, cfg)
    if age_s < ttl:
        return retention(n_tokens, age_s, cfg)
    floor = base_worth(n_tokens) * RETENTION_EXPIRED_FLOOR
    zero = cfg.idle_value_zero_s
    if zero <= 0:
        return floor
    if zero <= ttl:
        return 0.0
    x = min(max((age_s - ttl) / (zero - ttl), 0.0), 1.0)
    return floor * (1.0 - x * x)


def is_protected(s: SlotView, now: float, cfg: PolicyConfig) -> bool:
    """A non-blank history younger than its protection."""
    return not s.blank and s.n_tokens > 0 and now - s.last_use < protection_s(s.n_tokens, cfg)


def slot_value(s: SlotView, now: float, cfg: PolicyConfig) -> float:
    """Blank slots are worthless; others by value() at their idle age."""
    return 0.0 if s.blank or s.n_tokens <= 0 else value(s.n_tokens, now - s.last_use, cfg)


# ---------------------------------------------------------------------------------------------
# Matching: own slot and near-match sources (shared by pick_slot and place)
# ---------------------------------------------------------------------------------------------

def near_match_tolerance(best: int, prompt_rate_tps: float, cfg: PolicyConfig) -> int:
    """Tokens by which a match may fall short of the best and still count as near: the larger of
    2% of the best and one second of the prompt rate, at most 4096 tokens."""
    return int(min(max(cfg.near_match_share * best, cfg.near_match_s * prompt_rate_tps), cfg.near_match_tokens))


def holds_own_prefix(s: SlotView, tol: int, cfg: PolicyConfig) -> bool:
    """The slot's history is (within tol tokens, and for at least own_min_share of it) a prefix of
    the prompt: the request's own conversation. Otherwise it holds another conversation (sharing at
    most a system prompt). A blank slot (a superseded copy too) is never one's own: it is taken as a
    blank slot is, its tokens still a source."""
    return (not s.blank and s.common > 0 and s.n_tokens - s.common <= tol
            and s.common >= cfg.own_min_share * s.n_tokens)


def _match(slots: Sequence[SlotView], request: RequestView, cfg: PolicyConfig):
    best_slot = max(slots, key=lambda s: (s.common, not s.busy, -s.slot), default=None)
    best = best_slot.common if best_slot is not None else 0
    tol = near_match_tolerance(best, request.prompt_rate_tps, cfg)
    return best_slot, best, tol


def _with_source(target: SlotView, reason: str, best_slot: SlotView | None, best: int, tol: int,
                 now: float, cfg: PolicyConfig, own: bool) -> Decision:
    """A near match (within tol of the best) is as good as the best; else copy from the best."""
    source = None
    reused = target.common  # a history's common prefix is reusable even when the rest is given up
    if best_slot is not None and best_slot.slot != target.slot and best - target.common > tol:
        source, reused = best_slot.slot, best
    lost = 0 if target.blank else max(target.n_tokens - target.common, 0)
    loss = 0.0 if own else slot_value(target, now, cfg)
    return Decision(target.slot, reason, reused, source, target.group, lost, loss)


def decide_to(target: SlotView, reason: str, slots: Sequence[SlotView], request: RequestView, now: float,
              cfg: PolicyConfig) -> Decision:
    """A new conversation's Decision for `target`, chosen by another rule (the learned policy): the
    same near-match source, reuse and loss as place()'s own choices."""
    best_slot, best, tol = _match(slots, request, cfg)
    return _with_source(target, reason, best_slot, best, tol, now, cfg, False)


# ---------------------------------------------------------------------------------------------
# Plain --batch (seed 001)
# ---------------------------------------------------------------------------------------------

def pick_slot(slots: Sequence[SlotView], request: RequestView, now: float, cfg: PolicyConfig,
              group_load: Mapping[int, int] | None = None) -> Decision:
    """Seed 001: own prefix first (near matches are sources); then an empty slot; then with
    `expire_s` the least recently used of the slots idle that long, else the shortest history; off:
    the least recently used. With `cache_affinity`: `place()`, unless one group and `expire_s` set."""
    if cfg.cache_affinity and (cfg.expire_s <= 0 or len({s.group for s in slots}) > 1):
        return place(slots, request, now, cfg, group_load or {})
    best_slot, best, tol = _match(slots, request, cfg)
    idle = [s for s in slots if not s.busy]
    if not idle:
        return Decision(None, "all_busy")
    own = [s for s in idle if holds_own_prefix(s, tol, cfg)]
    if own:
        t = max(own, key=lambda s: (s.common, s.last_use, -s.slot))
        return _with_source(t, "own_prefix", best_slot, best, tol, now, cfg, True)
    blank = [s for s in idle if s.blank or s.n_tokens <= 0]
    if blank:
        t = min(blank, key=lambda s: s.slot)
        return _with_source(t, "empty", best_slot, best, tol, now, cfg, False)
    if cfg.expire_s > 0:
        expired = [s for s in idle if now - s.last_use >= cfg.expire_s]
        if expired:
            t = min(expired, key=lambda s: (s.last_use, s.slot))
            return _with_source(t, "expired_lru", best_slot, best, tol, now, cfg, False)
        t = min(idle, key=lambda s: (s.n_tokens, s.last_use, s.slot))
        return _with_source(t, "shortest", best_slot, best, tol, now, cfg, False)
    t = min(idle, key=lambda s: (s.last_use, s.slot))
    return _with_source(t, "lru", best_slot, best, tol, now, cfg, False)


# ---------------------------------------------------------------------------------------------
# Pipelined groups (seed 000)
# ---------------------------------------------------------------------------------------------

def reclaim_order_key(s: SlotView, now: float, cfg: PolicyConfig, group_load: Mapping[int, int]):
    """The new-conversation order over unprotected slots: not worth keeping first (blank, or expired
    below expired_keep_score), then group load, then the lowest value, a blank slot first at an equal
    value; then the oldest use and the lowest id so that the order is total."""
    v = slot_value(s, now, cfg)
    blank = s.blank or s.n_tokens <= 0
    worth_keeping = (not blank) and v >= cfg.expired_keep_score
    return (worth_keeping, group_load.get(s.group, 0), v, not blank, s.last_use, s.slot)


def reclaim_slot(slots: Sequence[SlotView], now: float, cfg: PolicyConfig, group_load: Mapping[int, int],
                 keep_worth_limit: float | None = None) -> tuple[SlotView | None, str]:
    """The idle, unprotected slot a new conversation or a park takes, and why.

    `keep_worth_limit` (parks): an expired history worth keeping is eligible only when its value is
    at most this (main's value / park_value_ratio); None: every unprotected slot is eligible.
    Returns (None, "all_protected") when no slot qualifies; the caller decides what then."""
    cands = []
    for s in slots:
        if s.busy or is_protected(s, now, cfg):
            continue
        if keep_worth_limit is not None:
            v = slot_value(s, now, cfg)
            if not s.blank and s.n_tokens > 0 and v >= cfg.expired_keep_score and v > keep_worth_limit:
                continue
        cands.append(s)
    if not cands:
        return None, "all_protected"
    t = min(cands, key=lambda s: reclaim_order_key(s, now, cfg, group_load))
    if t.blank or t.n_tokens <= 0:
        return t, "blank"
    return t, ("expired_keep" if slot_value(t, now, cfg) >= cfg.expired_keep_score else "expired")


def least_loss_slot(slots: Sequence[SlotView], now: float, cfg: PolicyConfig,
                    group_load: Mapping[int, int]) -> SlotView | None:
    """No wait: every idle history protected, take the least loss at once; losses within
    loss_tie_share of the least go by group load."""
    idle = [s for s in slots if not s.busy]
    if not idle:
        return None
    losses = {s.slot: slot_value(s, now, cfg) for s in idle}
    least = min(losses.values())
    close = [s for s in idle if losses[s.slot] <= least * (1.0 + cfg.loss_tie_share)]
    return min(close, key=lambda s: (group_load.get(s.group, 0), losses[s.slot], s.last_use, s.slot))


def place(slots: Sequence[SlotView], request: RequestView, now: float, cfg: PolicyConfig,
          group_load: Mapping[int, int]) -> Decision:
    """Seed 000. A continued conversation (an idle slot holds its prefix) runs in that slot, or in a
    blank slot of a less loaded group (copying from its own), never in a slot holding another
    conversation. A new one takes `reclaim_slot`'s choice; every history protected: the least loss."""
    best_slot, best, tol = _match(slots, request, cfg)
    idle = [s for s in slots if not s.busy]
    if not idle:
        return Decision(None, "all_busy")
    own = [s for s in idle if holds_own_prefix(s, tol, cfg)]
    if own:
        t = max(own, key=lambda s: (s.common, -group_load.get(s.group, 0), s.last_use, -s.slot))
        load = group_load.get(t.group, 0)
        blank = [s for s in idle if (s.blank or s.n_tokens <= 0) and group_load.get(s.group, 0) < load]
        if blank:
            b = min(blank, key=lambda s: (group_load.get(s.group, 0), s.slot))
            src = t.slot if t.common > b.common else None
            return Decision(b.slot, "blank_less_loaded", max(t.common, b.common), src, b.group, 0, 0.0)
        return _with_source(t, "own_prefix", best_slot, best, tol, now, cfg, True)
    t, why = reclaim_slot(idle, now, cfg, group_load)
    if t is not None:
        return _with_source(t, why, best_slot, best, tol, now, cfg, False)
    t = least_loss_slot(idle, now, cfg, group_load)
    assert t is not None  # idle is not empty
    return _with_source(t, "least_loss", best_slot, best, tol, now, cfg, False)


# ---------------------------------------------------------------------------------------------
# Parking the solo path's conversation (seed 000)
# ---------------------------------------------------------------------------------------------

def plan_park(main: MainView, slots: Sequence[SlotView], now: float, cfg: PolicyConfig,
              group_load: Mapping[int, int] | None = None) -> ParkDecision:
    """Where main's conversation goes before a request displaces it. `slots[i].common` is the
    tokens slot i shares with main's history. Order: skip below expired_keep_score or
    park_min_value (`main_low_value`); skip when a slot holds park_kept_share of it (`kept_share`);
    its own older copy (a superseded one too); else the reclaim order, where a history worth keeping counts only when main
    is worth park_value_ratio times as much (0: never); never a protected slot (`no_target`)."""
    load = group_load or {}
    if main.n_tokens <= 0:
        return ParkDecision(None, "skip", "main_empty")
    main_value = value(main.n_tokens, now - main.last_use, cfg)
    if main_value < cfg.expired_keep_score or main_value < cfg.park_min_value or main_value <= 0:
        return ParkDecision(None, "skip", "main_low_value")
    need = cfg.park_kept_share * main.n_tokens
    if any(not s.blank and s.common >= need for s in slots):
        return ParkDecision(None, "skip", "kept_share")
    # a superseded (blank) copy is its older copy too: parks reuse that slot and leave the empty slots
    # empty (else every side request left another stale copy of the conversation in another slot)
    own = [s for s in slots if not s.busy and 0 < s.n_tokens <= s.common]
    if own:
        t = max(own, key=lambda s: (s.common, -s.slot))
        return ParkDecision(t.slot, "own_copy", None, t.common, main.last_use, 0)
    limit = main_value / cfg.park_value_ratio if cfg.park_value_ratio > 0 else -1.0
    t, why = reclaim_slot(slots, now, cfg, load, keep_worth_limit=limit)
    if t is None:
        return ParkDecision(None, "skip", "no_target")
    lost = 0 if t.blank else max(t.n_tokens - t.common, 0)
    return ParkDecision(t.slot, why, None, t.common, main.last_use, lost)
