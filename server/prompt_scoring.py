"""Scoring a prompt (`/v1/completions` with `echo` and `logprobs`, lm-eval-harness's loglikelihood): each prompt
token's log-probability given the tokens before it, with its likeliest alternatives, from the logits the engine
keeps for every position of a piece it reads (Engine.extend; an ordinary read keeps the last position's only).

Pure: logits in, entries out (sampling.token_logprobs' shape, the generated tokens' too). Not here: reading the
pieces (the scheduler), where a scored prompt starts (row_start: from its first token), the answer's shape
(openai_completions.completion_logprobs).
"""

from __future__ import annotations

from typing import Any

from strata.engine.sampling import token_logprobs

# the most prompt tokens one scored piece reads: their logits are kept whole, 128 rows of a 152K vocabulary's f32 78 MB
# (512: 311 MB); 128-token pieces read at 0.99x of 512's rate (scheduler.SOLO_PIECE_MIN)
SCORE_PIECE_ROWS = 128


def first_entry(prompt: list[int]) -> tuple[int, None, None]:
    """The prompt's first token: nothing comes before it, so no log-probability and no alternatives (OpenAI: null)."""
    return int(prompt[0]), None, None


def piece_entries(logits: Any, prompt: list[int], start: int, top: int) -> list:
    """The entries the rows of `logits` give, for a piece read from `prompt[start]`: row i holds the logits after
    prompt[start + i], so it scores prompt[start + i + 1]; the prompt's last row scores nothing (it starts the
    answer)."""
    n = min(len(logits), len(prompt) - start - 1)
    return [token_logprobs(logits[i], int(prompt[start + i + 1]), top) for i in range(max(0, n))]
