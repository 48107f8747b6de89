"""What keeps an answer off tool calls under `tool_choice: "none"` (OpenAI chat and Responses) and Anthropic's
`{"type": "none"}`, whose prompt writes every tool as `auto` does, so that a side request (a summary, a
compaction, a title) sent with the conversation's own tools reuses its history instead of reading it again.

What it is: `no_call_rule(answer, prefill)`, the rule (`NoCallRule`, its constraint strata.engine.no_call)
for a model's answer format (prompting.AnswerFormat): the markers its calls open with, refused where the call
readers would take them as a call. Not here: which answers get it (structured_output.answer_rule), reading
the answer (with no tool callable it is read as text, whatever it holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strata.engine.no_call import NoCall
from strata.engine.token_bytes import Vocabulary
from strata.server.call_probe import call_marker
from strata.server.prompting import HARMONY_FINAL, LLAMA_CALL_MARKER

# the blocks every call reader takes in any vocabulary (prompting.TOOL_BLOCK_MARKERS), beside a format's own
BLOCK_MARKERS = (b"<tool_call>", b"<TOOLCALL>")
# a Harmony message's recipient: in a header any one makes the message a call (harmony.py), not only functions.
HARMONY_RECIPIENT = b"to="


@dataclass(frozen=True)
class NoCallRule:
    """An answer kept off calls while the prompt shows the tools: no call marker written where the readers
    would take it as a call (strata.engine.no_call)."""

    markers: tuple[bytes, ...]
    reasoning: tuple[bytes, bytes] | None = None
    opened: bool = False            # the prompt opened the reasoning
    code_blocks: bool = True        # False: Harmony, whose calls are messages of their own
    prefix: bytes = b""             # the answer's start the request wrote itself (Anthropic's prefill)
    harmony: bool = False           # the markers count in message headers only (strata.engine.harmony)
    bare_calls: bool = False        # a bare JSON call's start refused too (strata.engine.bare_call_scan)

    @property
    def kind(self) -> str:
        """For /metrics: none (an answer kept off calls)."""
        return "none"

    def constraint_for(self, tokenizer: Any, eos_ids: Any) -> NoCall:
        return NoCall(self.markers, Vocabulary.of(tokenizer), reasoning=self.reasoning, opened=self.opened,
                      code_blocks=self.code_blocks, prefix=self.prefix, harmony=self.harmony,
                      bare_calls=self.bare_calls)


def no_call_rule(answer: Any, prefill: str = "") -> NoCallRule:
    """Harmony's recipient `to=` in a message header (any recipient there is a call: `to=python`, `to=functions:x`
    read as calls too, their text lost; a prefill continues a final message's body); else the `<tool_call>` /
    `<TOOLCALL>` blocks and the format's own marker (Mistral's `[TOOL_CALLS]`, Seed-OSS's `<seed:tool_call>`,
    Llama 3's `<|python_tag|>`) outside the reasoning and outside a code block opened after prose. Llama 3's
    calls are also a bare JSON object as the whole answer (`{"name": ..., "parameters": ...}`, no marker): its
    start is refused where parse_tool_calls would read a call (the first object's "name" a string beside an
    "arguments" / "parameters" key), a JSON answer that is no call left whole. Not kept off in the other
    formats, whose calls are blocks: a bare JSON call there is read as text, as every answer is when no tool
    is callable."""
    if getattr(answer, "harmony", False):
        return NoCallRule((HARMONY_RECIPIENT,), code_blocks=False, harmony=True,
                          prefix=(HARMONY_FINAL + prefill).encode() if prefill else b"")
    own = call_marker(answer)
    llama = bool(getattr(answer, "llama_calls", False))
    markers = BLOCK_MARKERS + ((own,) if own is not None and own not in BLOCK_MARKERS else ()) + \
        ((LLAMA_CALL_MARKER.encode(),) if llama else ())
    think = getattr(answer, "think", None)
    reasoning = (think[0].encode(), think[1].encode()) if think else None
    return NoCallRule(markers, reasoning=reasoning, opened=bool(getattr(answer, "opened", False)),
                      prefix=prefill.encode(), bare_calls=llama)
