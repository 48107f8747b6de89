"""Agent-style request timelines for `strata replay generate --kind agents` (seeded, reproducible).

What it models (DESIGN.md's traffic): a few long coding-agent conversations at once, each a system
and tools prompt of 10-25K tokens growing by a tool result and an answer per turn (a turn every few
seconds while the agent works), tasks separated by the human's idle gaps of minutes, compaction
into a fresh conversation past ~150K tokens, restarts, short side requests (titles, summaries,
one-line checks) next to the turns, and now and then a client whose top of prompt changes every
turn (nothing shared with its previous turn). Not here: real text; only counts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .timeline import Request, build_requests

KINDS = ("agents",)


@dataclass(frozen=True)
class AgentMix:
    """Knobs of the generator; the defaults make a plausible one-user coding day."""

    sessions_at_once: float = 2.5       # mean agent sessions running in parallel
    session_minutes: float = 45.0       # mean length of a session
    system_tokens: tuple[int, int] = (10_000, 25_000)
    turn_growth: tuple[int, int] = (150, 4_000)
    answer_tokens: tuple[int, int] = (30, 1_200)
    work_gap_s: tuple[float, float] = (2.0, 25.0)   # between turns of one task
    turns_per_task: tuple[int, int] = (3, 25)
    idle_gap_median_s: float = 150.0    # human reading / typing between tasks (lognormal)
    compact_tokens: int = 150_000
    compact_summary: tuple[int, int] = (15_000, 30_000)
    restart_share: float = 0.05         # a task boundary that starts a fresh conversation
    side_share: float = 0.2             # turns followed by a side request
    side_tokens: tuple[int, int] = (150, 3_000)
    unstable_top_share: float = 0.1     # sessions whose client changes the top of prompt every turn


MAX_HOURS = 10_000   # about 2.5 million requests; --hours inf generated without end


def generate(kind: str, hours: float, seed: int, mix: AgentMix | None = None) -> list[Request]:
    """A timeline of `hours` of agent traffic from `seed` (same arguments, same timeline)."""
    if kind not in KINDS:
        raise ValueError(f"--kind {kind!r}: known kinds are {', '.join(KINDS)}")
    if not 0 < hours <= MAX_HOURS:   # --hours inf generated for ever
        raise ValueError(f"--hours {hours!r}: expected more than 0 and at most {MAX_HOURS}")
    mix = mix or AgentMix()
    rng = random.Random(seed)
    end = hours * 3600.0
    rows: list[tuple[float, str, int, int, int]] = []
    n_conv = 0

    def new_conv() -> str:
        nonlocal n_conv
        n_conv += 1
        return f"c{n_conv}"

    # session start times: a Poisson process keeping about sessions_at_once running
    rate = mix.sessions_at_once / (mix.session_minutes * 60.0)
    t0 = 0.0
    starts = []
    for _ in range(max(1, round(mix.sessions_at_once))):
        starts.append(rng.uniform(0, 60))
    while True:
        t0 += rng.expovariate(rate)
        if t0 >= end:
            break
        starts.append(t0)
    for start in sorted(starts):
        stop = min(end, start + rng.expovariate(1.0 / (mix.session_minutes * 60.0)) + 300.0)
        unstable = rng.random() < mix.unstable_top_share
        t = start
        conv = new_conv()
        full = 0  # tokens of the previous turn's prompt + answer (0: a fresh conversation)
        prompt = rng.randint(*mix.system_tokens)
        while t < stop:
            for _ in range(rng.randint(*mix.turns_per_task)):
                if t >= stop:
                    break
                answer = rng.randint(*mix.answer_tokens)
                shared = 0 if unstable else full
                rows.append((t, conv, prompt, shared, answer))
                if rng.random() < mix.side_share:
                    rows.append((t + rng.uniform(0.2, 3.0), new_conv(), rng.randint(*mix.side_tokens), 0,
                                 rng.randint(5, 120)))
                full = prompt + answer
                t += rng.uniform(*mix.work_gap_s) + answer / 60.0  # tools run, the answer streams
                prompt = full + rng.randint(*mix.turn_growth)
                if prompt >= mix.compact_tokens:
                    conv, full, prompt = new_conv(), 0, rng.randint(*mix.compact_summary)
            t += rng.lognormvariate(0.0, 1.0) * mix.idle_gap_median_s
            if rng.random() < mix.restart_share:
                conv, full, prompt = new_conv(), 0, rng.randint(*mix.system_tokens)
    rows.sort(key=lambda r: r[0])
    return build_requests(rows)
