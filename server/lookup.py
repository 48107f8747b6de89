"""Lookup decoding: draft tokens copied from the conversation itself, checked by the model in one forward.

Coding agents' answers repeat their context: the code being edited, file names, tool arguments. When
the last few tokens of a request (its prompt and what it has generated so far) also occur earlier,
the tokens that followed there are a cheap guess of what comes next. The engine checks a guess in one
forward (`Engine.extend`), which on a CPU bound by reading the weights costs little more than one
decode step. Every token is still sampled from the model's own logits, in order, with the same
sampler state, and the engine's logits do not depend on how tokens are batched, so the output is
exactly what plain decoding gives (greedy or sampled with a seed); it only comes sooner.

This module is pure: the settings, finding a draft in a row's tokens, and sizing the next draft from
how the last ones fared. The scheduler applies it (server/lookup_step.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_MAX_DRAFT = 8     # draft tokens one check may carry (`--lookup-draft`; 0 turns lookup off)
EXPERTS_MAX_DRAFT = 0     # the same for a model with experts: off (default_max_draft)
DEFAULT_MAX_NGRAM = 4     # the longest suffix of the tokens looked up earlier in them
DEFAULT_MIN_NGRAM = 2     # the shortest suffix that counts as a match (one token matches too often)
DEFAULT_MAX_ROWS = 8      # only while at most this many requests generate (`--lookup-rows`): the more
                          # rows a step has, the more it is bound by arithmetic and the less guesses save
FIRST_DRAFT = 4           # a row's first draft size, then doubled on a full match, cut on a miss
MAX_PAUSE_STEPS = 32      # a row whose drafts keep failing waits at most this many steps between tries


def default_max_draft(n_expert: int) -> int:
    """`--lookup-draft` when the user sets none. A model with experts checks a guess at a much higher
    price: each guessed row runs experts of its own, so the check reads more weights than a decode step
    instead of the same ones (a 9-token check cost 5.7x a decode on a Qwen3-30B-A3B-shaped model,
    against 1.8x on the dense default model; benchmarks/RESULTS.md): guesses would have to be taken
    about 60% of the time to break even, about what agent traffic gives, so lookup stays off there."""
    return EXPERTS_MAX_DRAFT if n_expert > 0 else DEFAULT_MAX_DRAFT


@dataclass(frozen=True)
class LookupConfig:
    max_draft: int = DEFAULT_MAX_DRAFT
    max_ngram: int = DEFAULT_MAX_NGRAM
    min_ngram: int = DEFAULT_MIN_NGRAM
    max_rows: int = DEFAULT_MAX_ROWS

    def __post_init__(self) -> None:
        if not 0 <= self.max_draft <= 31:
            raise ValueError(f"lookup max_draft must be 0..31 (0: off), got {self.max_draft!r}")
        if not 1 <= self.min_ngram <= self.max_ngram <= 16:
            raise ValueError(f"lookup n-grams must satisfy 1 <= min_ngram <= max_ngram <= 16, got "
                             f"min_ngram={self.min_ngram!r}, max_ngram={self.max_ngram!r}")
        if self.max_rows < 1:
            raise ValueError(f"lookup max_rows must be >= 1, got {self.max_rows!r}")

    @property
    def enabled(self) -> bool:
        return self.max_draft > 0


class TokenHistory:
    """A row's tokens (prompt, then everything generated) in a growing int32 buffer, so that finding a
    draft compares arrays instead of walking a Python list."""

    def __init__(self, tokens: list[int]) -> None:
        self._buf = np.empty(max(64, 2 * len(tokens)), dtype=np.int32)
        self._n = 0
        self.extend(tokens)

    def __len__(self) -> int:
        return self._n

    def extend(self, tokens: list[int]) -> None:
        need = self._n + len(tokens)
        if need > len(self._buf):
            grown = np.empty(max(need, 2 * len(self._buf)), dtype=np.int32)
            grown[: self._n] = self._buf[: self._n]
            self._buf = grown
        self._buf[self._n: need] = tokens
        self._n = need

    def find_draft(self, cfg: LookupConfig, size: int) -> list[int]:
        """Up to `size` tokens that followed the latest earlier occurrence of the longest suffix (of
        max_ngram down to min_ngram tokens) that occurred before; [] when none did."""
        buf, n = self._buf, self._n
        top = min(cfg.max_ngram, n - 1)
        if top < cfg.min_ngram:
            return []
        # every match ends in an earlier place q < n - 1 of the last token (then a token follows it): found
        # once, then only those places are compared, and none (a row whose text does not repeat) costs one
        # comparison instead of one per n-gram length and token of it
        ends = np.flatnonzero(buf[: n - 1] == buf[n - 1])
        if not len(ends):
            return []
        for k in range(top, cfg.min_ngram - 1, -1):
            q = ends[ends >= k - 1]           # the k tokens ending at q start at q - k + 1 >= 0
            for j in range(1, k):
                if not len(q):
                    break
                q = q[buf[q - j] == buf[n - 1 - j]]
            if len(q):
                start = int(q[-1]) + 1        # the latest such place
                return buf[start: min(start + size, n)].tolist()
        return []


@dataclass(frozen=True)
class DraftState:
    """How a row's drafts have fared: the size of its next one, and steps to wait before trying again."""

    size: int = FIRST_DRAFT
    pause: int = 0          # steps left without a draft
    misses: int = 0         # checks in a row that accepted nothing


def draft_size(state: DraftState, cfg: LookupConfig, room: int) -> int:
    """Tokens the next draft may carry: 0 while paused, else the row's size within max_draft and the
    context's free room (the check feeds the pending token plus the draft)."""
    if not cfg.enabled or state.pause > 0:
        return 0
    return max(0, min(state.size, cfg.max_draft, room))


def after_step(state: DraftState, proposed: int, accepted: int, cfg: LookupConfig) -> DraftState:
    """The state after a step: `proposed` draft tokens checked (0: a plain decode step), `accepted` of
    them taken. A full match doubles the next draft; a partial one sizes it to what was taken plus
    one; none halves it and pauses the row for 1, 2, 4, ... steps (at most MAX_PAUSE_STEPS), so a
    row whose context does not repeat costs little."""
    if proposed == 0:   # (the same state, not an equal copy, when nothing changes: each plain step asks)
        return state if state.pause <= 0 else DraftState(state.size, state.pause - 1, state.misses)
    if accepted == proposed:
        return DraftState(min(2 * state.size, cfg.max_draft), 0, 0)
    if accepted > 0:
        return DraftState(max(1, min(accepted + 1, cfg.max_draft)), 0, 0)
    misses = state.misses + 1
    return DraftState(max(1, state.size // 2), min(MAX_PAUSE_STEPS, 2 ** (misses - 1)), misses)
