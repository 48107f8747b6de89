"""Several prompts in one `/v1/completions` request: `prompt` as an array of strings or of token-id arrays, as
OpenAI's legacy completions take it (lm-eval-harness sends a batch of contexts that way), one choice each, in
order (`index` = the prompt's position), the usage summed.

Pure: the body's `prompt` in, the prompts out; the choices' usage and timings summed. Not here: reading each
prompt (openai_completions.prompt_tokens) or running them (openai_completions.complete, one after another).
"""

from __future__ import annotations

from typing import Any

from strata.server.errors import APIError

# the most prompts one request may hold (OpenAI's bound on a prompt array); each runs as its own request
MAX_PROMPTS = 2048


def several_prompts(prompt: Any) -> list | None:
    """The prompts of an array of two or more (strings or token-id arrays, mixed as OpenAI allows); None for one
    prompt (a string, token ids, or an array holding one of those: openai_completions.one_prompt reads it). An array
    past MAX_PROMPTS is a 400 naming its length."""
    if not (isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, (str, list)) for p in prompt)):
        return None
    if len(prompt) > MAX_PROMPTS:
        raise APIError(400, f"'prompt' holds {len(prompt)} prompts; at most {MAX_PROMPTS} go in one request",
                       param="prompt")
    return list(prompt)


def summed_usage(usages: list[dict]) -> dict:
    """One request's usage for its choices': every count added up (prompt_tokens_details' too)."""
    out: dict = {}
    for u in usages:
        for k, v in u.items():
            if isinstance(v, dict):
                out[k] = summed_usage([out.get(k, {}), v])
            else:
                out[k] = out.get(k, 0) + v
    return out
