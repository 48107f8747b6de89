"""A thinking model's reasoning, `<think>...</think>` at the start of its answer (Qwen3, QwQ, DeepSeek-R1
and its distills), kept apart from the answer: OpenAI's `reasoning_content`, Anthropic's `thinking` block,
the Responses API's `reasoning` item. Templates of such models often open the block in the generation
prompt (the prompt ends with `<think>`), so the answer starts inside it.

- `thinking_opened(engine, prompt)`: whether the prompt ends inside an open `<think>`.
- `split_reasoning(text, opened)`: (the reasoning or None, the answer after it), for a finished answer.
- `ReasoningGate(opened)`: the same routing for a streamed answer, piece by piece; what it emits, joined,
  equals what split_reasoning returns.

The reasoning is stripped of the whitespace around it and the answer of the whitespace before it, as
these templates write them back into a prompt. Not here: what each API does with it (its module), tool
calls in the answer (prompting.py).
"""

from __future__ import annotations

from typing import Any

OPEN, CLOSE = "<think>", "</think>"
PROMPT_TAIL_TOKENS = 8   # enough of the prompt's end to hold "<think>\n" in any tokenizer


def thinking_opened(engine: Any, prompt: list[int]) -> bool:
    return engine.detokenize(prompt[-PROMPT_TAIL_TOKENS:]).rstrip().endswith(OPEN)


def split_reasoning(text: str, opened: bool) -> tuple[str | None, str]:
    """(reasoning, answer); reasoning None when the answer does not think. An answer cut off while
    thinking is all reasoning and an empty answer."""
    body = text
    if not opened:
        head = text.lstrip()
        if not head.startswith(OPEN):
            return None, text
        body = head[len(OPEN):]
    end = body.find(CLOSE)
    if end < 0:
        return body.strip(), ""
    return body[:end].strip(), body[end + len(CLOSE):].lstrip()


def _held_tail(text: str) -> int:
    """Characters at the end of `text` that may not go out yet while thinking: a start of CLOSE and the
    whitespace before it, or trailing whitespace (either may turn out to end the reasoning)."""
    for k in range(min(len(CLOSE) - 1, len(text)), 0, -1):
        if text.endswith(CLOSE[:k]):
            before = text[:-k]
            return k + len(before) - len(before.rstrip())
    return len(text) - len(text.rstrip())


class ReasoningGate:
    """Routes a streamed answer into ("reasoning", text) and ("text", text) pieces."""

    def __init__(self, opened: bool) -> None:
        self.mode = "reasoning" if opened else "start"   # start -> reasoning -> after -> answer
        self.buf = ""
        self.fresh = True                                 # no reasoning text sent yet (leading whitespace dropped)

    def feed(self, piece: str) -> list[tuple[str, str]]:
        self.buf += piece
        out: list[tuple[str, str]] = []
        if self.mode == "start":
            head = self.buf.lstrip()
            if head.startswith(OPEN):
                self.mode, self.buf = "reasoning", head[len(OPEN):]
            elif OPEN.startswith(head):
                return []                                 # may still become "<think>"
            else:
                self.mode = "answer"
        if self.mode == "reasoning":
            if self.fresh:
                self.buf = self.buf.lstrip()
            end = self.buf.find(CLOSE)
            if end >= 0:
                out.append(("reasoning", self.buf[:end].rstrip()))
                self.mode, self.buf = "after", self.buf[end + len(CLOSE):]
            else:
                keep = len(self.buf) - _held_tail(self.buf)
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
