"""A request running in one context (a Row) and the pure reads over it: its generation speed, the tokens
its held answer must write next, and where its prompt left the history it was compared with.

Plain data: no engine, no slot table, no I/O. Not here: what the scheduler does with a row (row_start.py
starts it, scheduler.py and lookup_step.py step it, row_output.py takes its tokens and ends it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from strata.server import lookup
from strata.server.jobs import Job, StopMatcher
from strata.server.slots import WindowRate


@dataclass(eq=False)
class Row:
    """A job running in a context."""

    job: Job
    ctx: int
    max_tokens: int
    sampler: Any
    decoder: Any
    stopper: StopMatcher
    phase: str = "prefill"
    pos: int = 0                       # prompt tokens the context holds
    reused: int = 0
    source: str = "none"
    mismatch_at: int | None = None
    mismatch_excerpt: str | None = None
    generated: list[int] = field(default_factory=list)
    next_token: int | None = None
    started: float = field(default_factory=time.monotonic)
    prefill_s: float = 0.0
    first_token_at: float | None = None
    prompt_counted: bool = False       # its prompt is in the metrics (row_output.count_prompt)
    finished_at: float | None = None
    sampled: int = 0                   # tokens sampled, an end-of-turn token included (the decode rate's count)
    history: lookup.TokenHistory | None = None   # prompt + generated, built at its first lookup
    draft: lookup.DraftState = field(default_factory=lookup.DraftState)
    drafted: int = 0                   # lookup decoding: draft tokens checked, and taken
    draft_taken: int = 0
    forced_taken: int = 0              # a held answer's forced text taken in lookup steps (lookup_step.take_draft)
    prefill_chunks: int = 0            # engine.prefill calls for this prompt
    steps_during_prefill: int = 0      # other rows' decode steps between its chunks (the continuous agenda)
    steps_passed_over: int = 0         # mixed steps in a row that read none of its prompt (prompt_order.plan)
    prefill_window: WindowRate = field(default_factory=WindowRate)   # (prefill seconds, pos): live prefill_tps
    decode_window: WindowRate = field(default_factory=WindowRate)    # (wall clock, generated): live decode_tps
    logprobs: list = field(default_factory=list)   # with job.logprobs: sampling.token_logprobs per token
    prompt_logprobs: list = field(default_factory=list)   # with job.prompt_logprobs: an entry per prompt token read
    logprob_starts: list[int] = field(default_factory=list)   # where each entry's token's text begins (characters)
    logprobs_posted: int = 0           # streamed: entries sent so far (those whose text was released)
    decoded_chars: int = 0             # characters the generated tokens decoded to so far

    def prompt_overdue(self, now: float) -> bool:
        """Whether its prompt is still being read `job.max_prompt_s` after the row began (llama.cpp's
        t_max_prompt_ms, which an editor sends with each completion): the scheduler ends it then."""
        return (self.job.max_prompt_s > 0 and self.phase == "prefill" and self.pos < len(self.job.prompt)
                and now - self.started > self.job.max_prompt_s)

    def forced(self) -> list[int]:
        """The tokens the held answer must write next, whatever the logits (canonical_split.py), or []."""
        upcoming = getattr(self.sampler.constraint, "upcoming", None)
        return upcoming() if upcoming is not None else []


def decode_rate(row: Row) -> float | None:
    """A finished request's generation speed: the tokens its decode steps made (those after the first,
    which came with the prompt's read) over the time from its first token to its end; None without one.
    The same count and time as its `timings` (jobs.Completion), so the slot, the monitor and the answer
    agree."""
    decoded = row.sampled - 1
    if decoded <= 0 or row.first_token_at is None or row.finished_at is None or row.finished_at <= row.first_token_at:
        return None
    return decoded / (row.finished_at - row.first_token_at)


def mismatch_position(compared: list[tuple[int, int]], limit: int) -> int | None:
    """Where the prompt left the longest history it was compared with (live contexts and the cache's
    lookup), as (matching tokens, history length) pairs; None when that history is a prefix of the
    prompt or matched up to `limit`. Never below what was reused, since reuse comes from one of them."""
    best = max((n for n, _ in compared), default=0)
    if best >= limit or not any(n == best and length > best for n, length in compared):
        return None
    return best
