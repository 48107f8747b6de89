"""What crosses from the HTTP handlers to the scheduler's worker thread and back: a `Job` (token ids,
sampling settings, stop sequences, limits) and the events its handler reads (text pieces, then one
`Completion`). Also `StopMatcher`, the stop-sequence scan over streamed text.

Plain data and the thread-to-loop hand-off only; no engine calls and no HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strata.engine.sampling import SamplingParams

_ids = itertools.count(1)


def next_job_id() -> int:
    return next(_ids)


@dataclass
class Completion:
    """The end of a job: everything both APIs need for their response and usage fields."""

    text: str
    tokens: list[int]
    finish_reason: str            # "stop" | "length" | "cancelled" | "error"
    stop_sequence: str | None
    prompt_tokens: int
    cached_tokens: int
    prompt_ms: float
    predicted_ms: float
    error: str | None = None
    # tokens sampled after the first within predicted_ms, an end-of-turn token the answer leaves out included
    # (None: predicted_n - 1)
    decoded: int | None = None
    # with Job.logprobs: per generated token (token, log-probability, [(alternative, log-probability)])
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] | None = None
    # with Job.prompt_logprobs: per prompt token, the same; the first (nothing before it) (token, None, None)
    prompt_logprobs: list[tuple[int, float | None, list[tuple[int, float]] | None]] | None = None

    @property
    def timings(self) -> dict[str, float]:
        """llama.cpp's `timings` object. `predicted_ms` runs from the first token to the end; the first was
        sampled from the prompt's read (its time is in `prompt_ms`), so the generation rates are over the
        tokens the decode steps made in it (`decoded`), as the slot's and the monitor's `decode_tps` are:
        `predicted_n / predicted_ms` said 2x for a two-token answer and ~100,000 tokens/s for a one-token
        answer (no decode step: microseconds between its sampling and the end)."""
        prompt_n = self.prompt_tokens - self.cached_tokens
        predicted_n = len(self.tokens)
        decoded = predicted_n - 1 if self.decoded is None else self.decoded
        timed = decoded > 0 and self.predicted_ms > 0
        return {
            "cache_n": self.cached_tokens,
            "prompt_n": prompt_n,
            "prompt_ms": round(self.prompt_ms, 3),
            "prompt_per_token_ms": round(self.prompt_ms / prompt_n, 3) if prompt_n else 0.0,
            "prompt_per_second": round(prompt_n * 1000.0 / self.prompt_ms, 2) if self.prompt_ms > 0 else 0.0,
            "predicted_n": predicted_n,
            "predicted_ms": round(self.predicted_ms, 3),
            "predicted_per_token_ms": round(self.predicted_ms / decoded, 3) if timed else 0.0,
            "predicted_per_second": round(decoded * 1000.0 / self.predicted_ms, 2) if timed else 0.0,
        }


@dataclass(eq=False)
class Job:
    """One generation request. The handler creates it on the event loop; the worker thread fills the
    bookkeeping fields and posts events back through an `Outbox`."""

    api: str                      # "openai" | "responses" | "anthropic" | "infill" | "completion" (llama.cpp's)
    prompt: list[int]
    max_tokens: int
    sampling: SamplingParams
    stop: tuple[str, ...] = ()
    conversation: str = ""        # a key naming the conversation (system + first user message)
    ignore_eos: bool = False      # llama.cpp's extension: generate past end-of-turn tokens
    stream: bool = True           # False: the handler waits for the end; no per-token events are posted
    loop: asyncio.AbstractEventLoop | None = None
    events: asyncio.Queue[tuple[str, Any]] | None = None
    id: int = field(default_factory=next_job_id)
    submitted: float = field(default_factory=time.monotonic)
    submitted_wall: float = field(default_factory=time.time)
    cancelled: bool = False       # set by the handler when its client went away; read by the worker
    answer_rule: Any = None       # structured_output.JsonFormat (response_format) or ForcedCall (a call demanded)
    # the reasoning cut at a token budget (Anthropic's thinking.budget_tokens): thinking_budget.BudgetRule
    reasoning_budget: Any = None
    logprobs: int | None = None   # report each generated token's log-probability and this many alternatives
    # report each PROMPT token's too, with this many alternatives (completions' echo with logprobs: scoring): its
    # prompt is read from its first token with every position's logits (prompt_scoring.py), none of it reused
    prompt_logprobs: int | None = None
    # ends the answer once it holds a whole tool call (parallel calls turned off): one_call.FirstCallEnd
    call_end: Any = None
    # the request whose read of this prompt's start it waits for (context_choice.waits_for_shared_read)
    waits_for_read: int | None = None
    # tokens that end this answer beside the model's end-of-turn ones (an infill's: the FIM pad, repo and file
    # separator tokens, strata.engine.fim.FimTokens.end_ids); not sent, as an end-of-turn token is not
    end_tokens: frozenset[int] = frozenset()
    # an editor's code completion (a fill-in-the-middle prompt): its history stays in the contexts for the next
    # keystroke's and is never parked into the conversation cache (ContextState.completion)
    completion: bool = False
    # the client sent the prompt as token ids (/v1/completions' or /completion's `prompt: [ids]`): it asked for
    # exactly those tokens (a given tokenization scored, its logprobs), so they are read as sent, never taken for a
    # context's history in other tokens for the same bytes (context_choice.align_arrival)
    exact_tokens: bool = False
    # llama.cpp's t_max_prompt_ms for an answer a client waits for: once its prompt has been read this long
    # without reaching its end, it ends with nothing answered (finish "length"), what was read kept in its context
    # for the next keystroke's request (0: no limit; Row.prompt_overdue)
    max_prompt_s: float = 0.0



def answer_room(max_tokens: int) -> int:
    """What a prompt's answer needs of its context past the prompt: one token at least, or nothing for a prompt
    only scored (max_tokens 0, /v1/completions' echo: nothing generated), which may fill the context. The one rule
    for the too-long 400 (prompting.check_fits' room) and for a slot it fits (context_choice.fits)."""
    return 1 if max_tokens > 0 else 0

# Streamed text waits up to this long to travel with the next steps' text (one wake-up of the loop and
# one socket write for several tokens of a stream); a stream's first text and every other event go out
# at the end of their step. Invisible to a reader (8 ms), and the event loop thread then takes less of
# the cores the engine computes on.
STREAM_COALESCE_S = 0.008


class Outbox:
    """The worker thread's events, handed to their handlers' loops at the end of a step: one wake-up of
    each loop per delivery, not one per token and stream (a thread-safe call costs a pipe write and a
    loop wake-up, ~80 us here). A stream's consecutive text events are merged into one; text after a
    stream's first may wait up to `coalesce_s` for the next steps' (see STREAM_COALESCE_S); so may the
    events of a job not streamed before its "done", whose handler reads them only then."""

    def __init__(self, coalesce_s: float = STREAM_COALESCE_S, clock: Callable[[], float] = time.monotonic) -> None:
        if coalesce_s < 0:
            raise ValueError(f"Outbox: coalesce_s must be >= 0, got {coalesce_s!r}")
        self._items: list[list] = []            # [job, kind, payload]
        self._last_text: dict[int, list] = {}   # job id -> its pending text item (merged into)
        self._started: set[int] = set()         # jobs whose first text has been delivered
        self._urgent = False                    # something that must go out at the end of this step
        self._coalesce_s = coalesce_s
        self._clock = clock
        self._delivered_at = clock()

    def post(self, job: Job, kind: str, payload: Any) -> None:
        if job.loop is None or job.events is None:
            return
        if kind == "text":
            pending = self._last_text.get(job.id)
            if pending is not None:
                pending[2] += payload
                return
            item = [job, kind, payload]
            self._last_text[job.id] = item
            self._items.append(item)
            self._urgent = self._urgent or job.id not in self._started
            return
        self._last_text.pop(job.id, None)       # later text must not be merged ahead of this event
        self._items.append([job, kind, payload])
        # a job not streamed reads nothing before its "done" (JobEvents.until_done): its "start" rides with
        # the "done" instead of waking the loop on its own (a wake-up mid-job also stalls this thread on
        # the GIL while the loop handles it)
        self._urgent = self._urgent or job.stream or kind == "done"

    def flush(self, force: bool = False) -> None:
        """Delivers everything posted so far, in order per job, unless it is only text that may wait."""
        if not self._items:
            return
        now = self._clock()
        if not (force or self._urgent or now - self._delivered_at >= self._coalesce_s):
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, tuple[str, Any]]]] = {}
        for job, kind, payload in self._items:
            by_loop.setdefault(job.loop, []).append((job.events, (kind, payload)))
            if kind == "text":
                self._started.add(job.id)
            elif kind == "done":
                self._started.discard(job.id)
        self._items, self._last_text, self._urgent, self._delivered_at = [], {}, False, now
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:      # the loop is closed: the server is stopping
                pass


def _deliver(items: list[tuple[asyncio.Queue, tuple[str, Any]]]) -> None:
    for queue, event in items:
        queue.put_nowait(event)


class StopMatcher:
    """Scans generated text for stop sequences. `feed(piece)` returns the text that is safe to send now
    (never a prefix of a stop sequence that may still complete) and whether a stop sequence matched.

    Each feed looks only at what the piece can change: for each stop, the end of the text that is a start
    of it (`_held`) and the piece. A scan of the whole held span for every length (as before) cost the
    square of the text's length a token, on the engine's thread: 16 stops of 100 KB that never match took
    40 ms a token by 8,000 characters and more after, for every slot."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.text = ""            # all text accepted so far (without the stop sequence)
        self._sent = 0            # characters of `text` already released
        self._held = [0] * len(self.stops)   # per stop: the longest end of `text` that starts it
        self.matched: str | None = None

    def feed(self, piece: str) -> str:
        if self.matched is not None:
            return ""
        if not self.stops:             # nothing to hold back (most requests): every piece goes at once
            self.text += piece
            return self._release(len(self.text))
        before = len(self.text)
        self.text += piece
        best: tuple[int, str] | None = None
        for i, s in enumerate(self.stops):
            # a match ending in the piece begins in the held end of the text (or in the piece)
            at = self.text.find(s, before - self._held[i])
            if at >= 0 and (best is None or at < best[0]):
                best = (at, s)
        if best is not None:
            self.text = self.text[: best[0]]
            self.matched = best[1]
            return self._release(len(self.text))
        for i, s in enumerate(self.stops):
            # the new held end is at most the old one and the piece (an end of the text that starts `s`,
            # less the piece, was an end of the text before that starts `s`)
            self._held[i] = next((k for k in range(min(len(s) - 1, len(self.text), self._held[i] + len(piece)), 0, -1)
                                  if self.text.endswith(s[:k])), 0)
        return self._release(len(self.text) - max(self._held, default=0))

    @property
    def released(self) -> int:
        """Characters of `text` given out so far (the rest is held: it may begin a stop sequence)."""
        return self._sent

    def flush(self) -> str:
        """At the end of generation: whatever was held back."""
        return self._release(len(self.text))

    def _release(self, upto: int) -> str:
        upto = max(upto, self._sent)
        out = self.text[self._sent: upto]
        self._sent = upto
        return out
