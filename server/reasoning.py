"""A thinking model's reasoning, `<think>...</think>` at the start of its answer (Qwen3, QwQ, DeepSeek-R1
and its distills; Magistral and Ministral 3 write `[THINK]...[/THINK]`, MISTRAL_TAGS; Seed-OSS
`<seed:think>...</seed:think>`, SEED_TAGS), kept apart from
the answer: OpenAI's `reasoning_content`, Anthropic's `thinking` block, the Responses API's `reasoning`
item. Templates of such models often open the block in the generation
prompt (the prompt ends with `<think>`), so the answer starts inside it.

`reasoning_tags(tokenizer)` picks them from the vocabulary. Each takes the model's `tags` (opening, closing;
THINK_TAGS unless given):
- `thinking_opened(engine, prompt)`: whether the prompt ends inside an open `<think>`.
- `split_reasoning(text, opened)`: (the reasoning or None, the answer after it), for a finished answer.
- `ReasoningGate(opened)`: the same routing for a streamed answer, piece by piece; what it emits, joined,
  equals what split_reasoning returns.
- `reasoning_token_count(pieces, opened)`: how many of the answer's tokens are its reasoning (the APIs'
  `reasoning_tokens`).

The reasoning is stripped of the whitespace around it and the answer of the whitespace before it, as
these templates write them back into a prompt. Not here: what each API does with it (its module), tool
calls in the answer (prompting.py).
"""

from __future__ import annotations

from typing import Any

THINK_TAGS = ("<think>", "</think>")
MISTRAL_TAGS = ("[THINK]", "[/THINK]")     # control tokens of Mistral's v13 tokenizers (Magistral 2507+)
SEED_TAGS = ("<seed:think>", "</seed:think>")   # tokens of Seed-OSS's vocabulary
PROMPT_TAIL_TOKENS = 8   # enough of the prompt's end to hold "<think>\n" in any tokenizer


def reasoning_tags(tokenizer: Any) -> tuple[str, str]:
    """The tags a model of this vocabulary thinks in: Mistral's or Seed-OSS's when the vocabulary has their
    opening token, else `<think>` (for the server's answers and `strata chat`'s display)."""
    token_id = getattr(tokenizer, "token_id", None)
    return next((t for t in (MISTRAL_TAGS, SEED_TAGS) if callable(token_id) and token_id(t[0]) is not None),
                THINK_TAGS)


def thinking_opened(engine: Any, prompt: list[int], tags: tuple[str, str] = THINK_TAGS) -> bool:
    return engine.detokenize(prompt[-PROMPT_TAIL_TOKENS:]).rstrip().endswith(tags[0])


def split_reasoning(text: str, opened: bool, tags: tuple[str, str] = THINK_TAGS) -> tuple[str | None, str]:
    """(reasoning, answer); reasoning None when the answer does not think. An answer cut off while
    thinking is all reasoning and an empty answer."""
    opener, closer = tags
    body = text
    if not opened:
        head = text.lstrip()
        if not head.startswith(opener):
            return None, text
        body = head[len(opener):]
    end = body.find(closer)
    if end < 0:
        return body.strip(), ""
    return body[:end].strip(), body[end + len(closer):].lstrip()


def reasoning_token_count(pieces: list[bytes], opened: bool, tags: tuple[str, str] = THINK_TAGS) -> int:
    """How many of an answer's tokens (each one's bytes, in order) it spent reasoning, as split_reasoning
    reads it: those through the one that ends the closing tag; all of them when it never closes (cut off
    while thinking); 0 for an answer that does not think."""
    text = b"".join(pieces)
    opener, closer = tags[0].encode(), tags[1].encode()
    start = 0
    if not opened:
        head = text.lstrip()
        if not head.startswith(opener):
            return 0
        start = len(text) - len(head) + len(opener)
    end = text.find(closer, start)
    if end < 0:
        return len(pieces)
    end, total = end + len(closer), 0
    for i, piece in enumerate(pieces):
        total += len(piece)
        if total >= end:
            return i + 1
    return len(pieces)


def _held_tail(text: str, closer: str) -> int:
    """Characters at the end of `text` that may not go out yet while thinking: a start of the closing tag
    and the whitespace before it, or trailing whitespace (either may turn out to end the reasoning)."""
    for k in range(min(len(closer) - 1, len(text)), 0, -1):
        if text.endswith(closer[:k]):
            before = text[:-k]
            return k + len(before) - len(before.rstrip())
    return len(text) - len(text.rstrip())


class ReasoningGate:
    """Routes a streamed answer into ("reasoning", text) and ("text", text) pieces."""

    def __init__(self, opened: bool, tags: tuple[str, str] = THINK_TAGS) -> None:
        self.open, self.close = tags
        self.mode = "reasoning" if opened else "start"   # start -> reasoning -> after -> answer
        self.buf = ""
        self.fresh = True                                 # no reasoning text sent yet (leading whitespace dropped)

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self.buf += piece
        out: list[tuple[str, str]] = []
        if self.mode == "start":
            head = self.buf.lstrip()
            if head.startswith(self.open):
                self.mode, self.buf = "reasoning", head[len(self.open):]
            elif self.open.startswith(head):
                return []                                 # may still become the opening tag
            else:
                self.mode = "answer"
        if self.mode == "reasoning":
            if self.fresh:
                self.buf = self.buf.lstrip()
            end = self.buf.find(self.close)
            if end >= 0:
                out.append(("reasoning", self.buf[:end].rstrip()))
                self.mode, self.buf = "after", self.buf[end + len(self.close):]
            else:
                keep = len(self.buf) - _held_tail(self.buf, self.close)
                out.append(("reasoning", self.buf[:keep]))
                self.buf = self.buf[keep:]
            if out[-1][1]:
                self.fresh = False
        if self.mode == "after":
            self.buf = self.buf.lstrip()
            if self.buf:
                self.mode = "answer"
        if self.mode == "answer":
            out.append(("text", self.buf))
            self.buf = ""
        return [(kind, text) for kind, text in out if text]

    def finish(self) -> list[tuple[str, str]]:
        """At the end: what was held (an answer that was only the start of "<think>", or reasoning cut off)."""
        rest, self.buf = self.buf, ""
        if self.mode == "start" and rest:
            return [("text", rest)]
        if self.mode == "reasoning" and rest.strip():
            return [("reasoning", rest.rstrip())]
        return []
