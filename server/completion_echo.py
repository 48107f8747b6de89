"""`echo` on the legacy `POST /v1/completions`: the prompt's text comes back before the completion's in
`choices[].text` (streamed: as the first chunk), as OpenAI's legacy completions answer it. A text prompt is echoed
as sent; token ids as their decoded text (special tokens as their texts).

With `logprobs: N` the prompt is scored too, as OpenAI does (lm-eval-harness's loglikelihood: `echo`,
`max_tokens: 0`, `logprobs`): `choices[].logprobs` lists the prompt's tokens, then the generated ones, the first
prompt token's log-probability and alternatives null (nothing comes before it); the prompt is then read whole
with every position's logits (prompt_scoring.py). `max_tokens: 0`, nothing generated, goes with `echo` only.
Refused with a 400 naming both fields: `echo` with `suffix` (a code completion's text goes in the middle of the
code, not after the prompt).
Not here: reading the prompt (openai_completions.prompt_tokens), the answer's shape.
"""

from __future__ import annotations

from typing import Any

from strata.server import fields as f
from strata.server.errors import APIError


def echo_asked(body: dict) -> bool:
    """Whether `echo` is true; a 400 for a pair it cannot go with (before the prompt is read or laid out)."""
    if not f.get_bool(body, "echo"):
        return False
    if body.get("suffix") is not None:
        raise APIError(400, "'echo' with 'suffix' is not supported: a code completion goes between the prompt and "
                            "the suffix; send one of the two", param="echo")
    return True


def completion_max_tokens(body: dict, echo: bool) -> int:
    """The completion's `max_tokens` (16 when not sent); 0, nothing generated, only with `echo` (the prompt echoed,
    scored with `logprobs`): without it the answer would be empty."""
    v = body.get("max_tokens")
    if v == 0 and not isinstance(v, bool):
        if not echo:
            raise APIError(400, "'max_tokens' 0 generates nothing: it goes with 'echo': true (the prompt echoed, "
                                "and scored with 'logprobs'); got 0 without 'echo'", param="max_tokens")
        return 0
    return f.get_max_tokens(body, ("max_tokens",), 16)


def echoed_prompt(prompt: Any, tokens: list[int], tokenizer: Any) -> str:
    """The text echoed before the completion: `prompt` (the body's one prompt, unwrapped) as sent when it is text,
    its `tokens` (the ids sent, checked) decoded when it was token ids."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(tokens)


def unseen_tokens(prompt: Any, tokens: list[int], tokenizer: Any) -> int:
    """How many of the prompt's first `tokens` its echo does not hold: 1 for a BOS the tokenizer put before a
    text `prompt` (Llama, Gemma, Mistral add one) that does not start with it as sent, else 0. Its scored entry
    (null, the first) stands at offset 0 taking no characters, so every text_offset indexes the echoed text."""
    bos = getattr(tokenizer, "bos_id", None)
    if not isinstance(prompt, str) or bos is None or not tokens or tokens[0] != bos:
        return 0
    return 0 if prompt.encode("utf-8", "surrogatepass").startswith(tokenizer.token_bytes(bos)) else 1
