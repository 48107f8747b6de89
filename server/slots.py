"""The slot table: what each engine context (main = 0, slots 1..N) holds and does, as the scheduler sees it.

Mechanism only. It keeps a mirror of each context's token history (so prefixes are compared without
asking the engine), the conversation key, the last actual use, speeds and the per-context state the
monitor shows. Which slot a request takes is decided by `server/slot_policy.py` (see
server/placement.py, which turns this table into the policy's plain data); nothing here chooses.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Collection
from dataclasses import dataclass, field

MAIN = 0
RATE_WINDOW_S = 2.0           # seconds of recent progress a live rate is measured over


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists (compares 1,024-token runs at C speed)."""
    n = min(len(a), len(b))
    i = 0
    step = 1024
    while i < n:
        j = min(i + step, n)
        if a[i:j] == b[i:j]:
            i = j
            continue
        while a[i] == b[i]:
            i += 1
        return i
    return n


class WindowRate:
    """Tokens per second over the last `window_s` of (clock, running count) samples: one deque append a
    step. `rate()` is None until two samples span some time."""

    def __init__(self, window_s: float = RATE_WINDOW_S, max_samples: int = 4096) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.window_s = window_s
        self._samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=max_samples)

    def add(self, t: float, count: int) -> None:
        self._samples.append((t, count))
        # keep one sample at or before the window's start, so the window is always fully covered
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.window_s:
            self._samples.popleft()

    def rate(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, n0), (t1, n1) = self._samples[0], self._samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 and n1 >= n0 else None


@dataclass
class ContextState:
    """One engine context. `tokens` is exactly what its KV holds (kept in step with every engine call)."""

    id: int
    group: int                    # -1 for main
    capacity: int
    tokens: list[int] = field(default_factory=list)
    conversation: str = ""
    last_use: float | None = None  # time.monotonic() when the last actual use ended (a park keeps the source's)
    busy_job: int | None = None    # id of the job running here
    phase: str = "idle"            # "idle" | "prefill" | "decode"
    valid: bool = True             # False after a failed engine call: its KV cannot be trusted
    superseded: bool = False       # a copy whose conversation went on in another context
    reused_tokens: int | None = None
    prefill_tps: float | None = None     # live while it reads a prompt (recent window), then the request's
    decode_tps: float | None = None      # live while it generates (recent window), then the request's
    prompt_tokens_last: int | None = None
    # its history as it is now went to the conversation cache (a park): parking it again before it changes
    # would only count it twice (a displaced main is parked, then overwritten); any change of tokens clears it
    parked: bool = False
    # a superseded copy that the request which went on held whole: the context holding it keeps it, so it is
    # overwritten without a park while that context (or a longer cache entry) is one the cache can keep
    # (parking.kept_elsewhere); any change of tokens clears it
    covered: bool = False
    # it holds a code completion's history (Job.completion): never parked into the conversation cache. The next
    # keystroke's prompt shares its start and differs after the cursor, so each completion a context gives up
    # would be a cache entry of its own: a 3,500-token SmolLM2 completion is 80 MB; at one every 1-2 s as the
    # user types, they filled the RAM level (8 entries, 658 MB in 30 s, benchmarks/fim_beside_agent.py) and,
    # oldest first, pushed the agents' parked histories down a level or out
    completion: bool = False
    # it holds a scored prompt's history (Job.prompt_logprobs: lm-eval-harness's loglikelihood): never parked either.
    # An evaluation sends thousands of distinct prompts, none a conversation that goes on: parked, each was an
    # entry of its own that pushed the agents' histories out of RAM, oldest first
    scored: bool = False
    # its KV from this position on was moved into place (a code completion's --cache-reuse: Engine.splice): an
    # approximation of a fresh read, so an exact request matches its history only before it (matched_by); None:
    # all of it is exact. Only a code completion's history has one (`completion` is set), so it is never parked;
    # a truncation to it or before, and any new history, clear it
    approx_from: int | None = None

    def matched_by(self, prompt: list[int], approximate: bool = False) -> int:
        """The prompt tokens this context's history holds for a request: the common prefix, and for an exact
        request (`approximate` False: any but a code completion) only what precedes `approx_from`."""
        n = common_prefix(self.tokens, prompt)
        return n if approximate or self.approx_from is None else min(n, self.approx_from)

    @property
    def blank(self) -> bool:
        """Empty, invalid or a superseded copy: worth nothing (seed 000)."""
        return not self.tokens or not self.valid or self.superseded

    @property
    def state(self) -> str:
        if self.busy_job is not None:
            return self.phase
        return "empty" if not self.tokens else "idle"

    def display_id(self) -> str | int:
        return "main" if self.id == MAIN else self.id


def held_by_another(contexts: list[ContextState], i: int, unkept: Collection[int] = ()) -> bool:
    """Whether another context holds context `i`'s history whole: its tokens are a prefix of the other's (of two
    equal histories, the first holds it). Writing both at a stop keeps one prefix twice, and the copy took the
    disk budget of another conversation (an agent soak: a 188.4 MiB copy beside its 191.8 MiB history evicted a
    130.8 MiB conversation, then was superseded). Only a context the stop keeps holds anything: not a code
    completion's nor a scored prompt's (never written), nor one in `unkept` (its history larger than every disk
    level's whole budget, so its write is refused: the shorter copy was then lost, where it fit)."""
    c = contexts[i]
    if not c.tokens or not c.valid:
        return False
    n = len(c.tokens)
    return any(j != i and j not in unkept and o.valid and not o.completion and not o.scored and len(o.tokens) >= n
               and (len(o.tokens) > n or j < i) and o.tokens[:n] == c.tokens for j, o in enumerate(contexts))


def stop_order(contexts: list[ContextState]) -> list[int]:
    """The contexts' indices in the order a stop writes their histories: least recently used first, so a disk
    budget that keeps only some (first in, first out) keeps the latest conversations. Written in the contexts'
    order, a soak's cold level kept slot 4's history, one its client had just ended, and let go the three that went
    on (benchmarks/RESULTS.md, session 37). A context whose use had not ended when the stop came is the latest;
    one never used (no `last_use`) the earliest; ties in the contexts' order."""
    def age(i: int) -> tuple[int, float, int]:
        c = contexts[i]
        if c.busy_job is not None:
            return (1, 0.0, i)
        return (0, c.last_use if c.last_use is not None else float("-inf"), i)
    return sorted(range(len(contexts)), key=age)


def idle_s(c: ContextState, now: float) -> float:
    """Seconds since context `c` was last used (`now` on time.monotonic's scale, as `last_use`), 0 while its use has
    not ended, math.inf where it never ended one (a session restored into a slot no request used): the least
    recent, as stop_order has it. What a park passes on, so a stop keeps the most recently used histories
    (stop_writes.hand_down_picks), not the most recently parked."""
    if c.busy_job is not None:
        return 0.0
    return math.inf if c.last_use is None else max(0.0, now - c.last_use)


class SlotTable:
    """Every context's state; the scheduler's worker thread is its only writer."""

    def __init__(self, n_ctx: int, n_slots: int, slot_ctx: int, n_groups: int) -> None:
        self.contexts: list[ContextState] = [ContextState(MAIN, -1, n_ctx)]
        for i in range(1, n_slots + 1):
            self.contexts.append(ContextState(i, (i - 1) % max(1, n_groups), slot_ctx))
        self.n_groups = max(1, n_groups)

    def __getitem__(self, ctx: int) -> ContextState:
        return self.contexts[ctx]

    @property
    def main(self) -> ContextState:
        return self.contexts[MAIN]

    @property
    def slots(self) -> list[ContextState]:
        return self.contexts[1:]

    def free_slots(self) -> list[ContextState]:
        return [c for c in self.slots if c.busy_job is None]

    def group_load(self) -> list[int]:
        """Busy slots per group (the unit of load)."""
        load = [0] * self.n_groups
        for c in self.slots:
            if c.busy_job is not None:
                load[c.group] += 1
        return load

    def best_source(self, prompt: list[int], exclude: int, approximate: bool = False) -> tuple[int | None, int]:
        """The context (other than `exclude`) holding the longest valid prefix of `prompt`; an approximate one
        (ContextState.approx_from) counted only before its approximation unless `approximate`."""
        best, best_n = None, 0
        for c in self.contexts:
            if c.id == exclude or not c.valid or not c.tokens:
                continue
            n = c.matched_by(prompt, approximate)
            if n > best_n:
                best, best_n = c.id, n
        return best, best_n

    # ----- mirror updates (called right after the engine call they describe) -----

    def set_tokens(self, ctx: int, tokens: list[int]) -> None:
        c = self.contexts[ctx]
        c.tokens = list(tokens)
        c.valid = True
        c.superseded = False
        c.parked = c.covered = False
        c.completion = c.scored = False   # what holds these tokens says so after (row_start, parking)
        c.approx_from = None        # likewise (row_start)

    def truncate(self, ctx: int, n: int) -> None:
        c = self.contexts[ctx]
        del c.tokens[n:]
        c.parked = c.covered = False
        if c.approx_from is not None and n <= c.approx_from:
            c.approx_from = None

    def extend(self, ctx: int, tokens: list[int]) -> None:
        c = self.contexts[ctx]
        c.tokens.extend(tokens)
        c.parked = c.covered = False

    def invalidate(self, ctx: int) -> None:
        c = self.contexts[ctx]
        c.valid = False
        c.parked = c.covered = False
        c.tokens = []
        c.approx_from = None
        c.conversation = ""

    def supersede_copies(self, conversation: str, keep: int, prompt: list[int], min_share: float) -> None:
        """A conversation went on in `keep` with `prompt`: its idle copies elsewhere that the prompt holds (at least
        `min_share` of each, the policy's own_min_share) are blank now (seed 000), wherever they are: a copy
        parked from main, the slot a solo request copied its history from into main, main's history that went on
        in a slot, a slot's that went on in another. Before, only a copy parked from main was: a history main took
        over from slot 3 and went on with kept its full worth there, and an /infill keystroke a second later took
        another conversation's 8,726-token slot instead (session 39's agent soak). A copy the prompt went
        another way from early keeps its worth: the same key does not make it the same history (a turn with other
        tools, a client's key shared by its side requests). A copy the prompt holds whole is kept there and is
        overwritten without a park (`covered`) while `keep`'s history, or a longer one of it, is one the cache can
        keep (not while it is larger than every level's whole budget: the shorter copy fits, and is then all of
        the conversation the cache can keep); one with a tail of its own (a branch: a session restored and
        continued from its saved point, an agent's rewind) is parked to the conversation cache when overwritten,
        or that tail, the conversation's main line, is lost."""
        if not conversation:
            return
        for c in self.contexts:
            if (c.id != keep and c.conversation == conversation and c.busy_job is None and c.tokens
                    and c.valid):
                common = common_prefix(c.tokens, prompt)
                if common >= min_share * len(c.tokens):
                    c.superseded = True
                    c.covered = common >= len(c.tokens) - 1
