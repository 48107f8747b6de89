"""Parallel tool calls turned off (OpenAI's `parallel_tool_calls: false`, on chat completions and the
Responses API; Anthropic's `tool_choice.disable_parallel_tool_use: true`): the answer carries one call at
most, and its generation ends once that call is whole rather than running on to calls thrown away.

`one_call_wanted(...)` reads each API's field (the policy); `FirstCallEnd` is what the scheduler feeds the
answer's text as it is generated (the mechanism): it says when the text after the reasoning holds a call
the API's reader (prompting.split_answer) reads whole. That is looked at only where a call can have just
closed: a block's closing tag (`</tool_call>` for Hermes JSON, Qwen3-Coder's XML and GLM's calls,
`</seed:tool_call>`, `</TOOLCALL>`), or a `}` for Mistral's `[TOOL_CALLS]NAME[ARGS]{...}`, which has no
closing tag; a closing tag inside a call's arguments is their text, as prompting's reader reads it
(chat_template.tool_call_blocks). A Harmony answer holds one call already (`<|call|>` ends it). Several
calls that close together (a JSON list of calls in one block, Mistral Nemo's list, a bare list as the whole
answer) are read and all but the first dropped: AnswerFormat.one_call.

Not here: the answer's reading (prompting.py), the scheduler's loop (scheduler.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from strata.engine.chat_template import xml_call_open
from strata.server.errors import APIError
from strata.server.fields import shown
from strata.server.prompting import MISTRAL_CALL_MARKER, AnswerFormat, split_tool_calls
from strata.server.reasoning import ReasoningGate

CALL_CLOSERS = ("</tool_call>", "</TOOLCALL>", "</seed:tool_call>")
_LONGEST = max(map(len, CALL_CLOSERS))


def one_call_wanted(value: Any, where: str, *, disable: bool) -> bool:
    """Whether a request's field turns parallel calls off: `parallel_tool_calls` (disable=False: false
    turns them off) or `disable_parallel_tool_use` (disable=True: true does); absent leaves them on. A
    value that is not a boolean is a 400 naming the field."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise APIError(400, f"'{where}' must be a boolean, got {shown(value)}", param=where)
    return value if disable else not value


def one_call_format(fmt: AnswerFormat, value: Any, where: str, *, disable: bool = False) -> AnswerFormat:
    """`fmt` for an answer of one call at most when the request's field (one_call_wanted) says so."""
    return replace(fmt, one_call=True) if one_call_wanted(value, where, disable=disable) else fmt


class FirstCallEnd:
    """Fed an answer's text piece by piece; `feed` says True once the answer (after its reasoning) holds a
    whole tool call of the offered `tools`."""

    def __init__(self, fmt: AnswerFormat, tools: list[dict]) -> None:
        self._thinking = ReasoningGate(fmt.opened, fmt.think)
        self._tools = tools
        self._flags = (fmt.mistral_calls, fmt.glm_calls, fmt.seed_calls)
        self._text = ""         # the answer after its reasoning, so far
        self._looked = 0        # how much of it has been looked at for a closing tag
        self._mistral_open = False   # a Mistral call's marker was written: a `}` may end its arguments

    def feed(self, piece: str) -> bool:
        for kind, text in self._thinking.feed(piece):
            if kind == "text":
                self._text += text
        fresh = self._text[max(0, self._looked - _LONGEST + 1):]   # a tag may straddle the last look
        self._looked = len(self._text)
        self._mistral_open = self._mistral_open or (self._flags[0] and MISTRAL_CALL_MARKER in fresh)
        closed = any(c in fresh for c in CALL_CLOSERS) or (self._mistral_open and fresh.rstrip().endswith("}"))
        # a closing tag inside an XML call's parameter is its text: the call goes on (a JSON call's reading
        # already sees through one inside its strings); a call in a code block after prose is not one yet,
        # though the block may turn out to end the answer (it may be an example): the answer goes on
        return closed and not xml_call_open(self._text) and bool(
            split_tool_calls(self._text, self._tools, *self._flags, answer_end=False)[1])


def first_call_end(fmt: AnswerFormat, tools: list[dict] | None) -> FirstCallEnd | None:
    """The cut for an answer that may carry one call (fmt.one_call), None when none is needed: no tools
    offered, or a Harmony answer (its first call ends it)."""
    if not fmt.one_call or not tools or fmt.harmony:
        return None
    return FirstCallEnd(fmt, tools)
