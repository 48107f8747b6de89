"""`echo` on the legacy `POST /v1/completions`: the prompt's text comes back before the completion's in
`choices[].text` (streamed: as the first chunk), as OpenAI's legacy completions answer it. A text prompt is echoed
as sent; token ids as their decoded text (special tokens as their texts).

Refused with a 400 naming both fields: `echo` with `logprobs`, where OpenAI scores every prompt token too (the
engine reads a prompt in chunks and keeps the last position's logits only, and a prompt reused from a slot or the
cache is not read at all: no cheap way to those), and `echo` with `suffix` (a code completion's text goes in the
middle of the code, not after the prompt).
Not here: reading the prompt (openai_api.prompt_tokens), the answer's shape.
"""

from __future__ import annotations

from typing import Any

from strata.server import fields as f
from strata.server.errors import APIError


def echo_asked(body: dict) -> bool:
    """Whether `echo` is true; a 400 for a pair it cannot go with (before the prompt is read or laid out)."""
    if not f.get_bool(body, "echo"):
        return False
    if body.get("logprobs") is not None:
        raise APIError(400, "'echo' with 'logprobs' is not supported: the prompt's tokens have no log-probabilities "
                            "here; send one of the two", param="echo")
    if body.get("suffix") is not None:
        raise APIError(400, "'echo' with 'suffix' is not supported: a code completion goes between the prompt and "
                            "the suffix; send one of the two", param="echo")
    return True


def echoed_prompt(prompt: Any, tokens: list[int], tokenizer: Any) -> str:
    """The text echoed before the completion: `prompt` (the body's one prompt, unwrapped) as sent when it is text,
    its `tokens` (the ids sent, checked) decoded when it was token ids."""
    return prompt if isinstance(prompt, str) else tokenizer.decode(tokens)
