"""Gemma 3 answers to a request with tools: its template has no tool format (Strata writes the tools into the
prompt with Hermes' `<tool_call>` JSON format, chat_template.render_tools_into_system), so its calls come back
through the generic readers: a `<tool_call>` JSON block, or a bare JSON call / a ```json fence as the whole
answer. A ```tool_code block (Python, as Google's function-calling guide shows) stays text, as in llama.cpp,
which has no Gemma 3 reader (its auto-parser finds no tool markers in Gemma 3's template; only Gemma 4 has
one)."""

from __future__ import annotations

import json

import pytest
from strata.server.prompting import PLAIN, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}


@pytest.mark.parametrize("answer", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '{"name": "get_weather", "arguments": {"city": "Paris"}}',
    '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
])
def test_json_calls_are_read(answer):
    assert split_answer(answer, PLAIN, TOOLS) == (None, "", [CALL])


def test_tool_code_stays_text_and_streams():
    answer = '```tool_code\nprint(get_weather(city="Paris"))\n```'
    assert split_answer(answer, PLAIN, TOOLS) == (None, answer, [])
    s = AnswerStream(PLAIN, TOOLS)
    streamed = "".join(t for k, t in s.feed(answer[:16]) + s.feed(answer[16:]) if k == "text")
    assert streamed.startswith("```tool_code")          # not held: a fence of another language is no call
    pieces, rest, calls = s.finish(answer)
    assert streamed + "".join(t for _, t in pieces) + rest == answer and calls == []
