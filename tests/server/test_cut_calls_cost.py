"""What reading an answer the length limit cut costs, counted (not timed): the whole reader
(chat_template.parse_tool_calls, whose block search grows with the blocks) runs once for a cut answer of
`<tool_call>` blocks, as for one not cut. 94ab509 read every cut answer with whole calls a second time (to
tell the blocks' calls from Mistral's / GLM's / Seed-OSS's), which only a vocabulary with those markers
and an open `<tool_call>` block at the end needs."""

from __future__ import annotations

import pytest
import strata.server.prompting as prompting
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}} for name in ("read_file", "search")]
BLOCK = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
CUT = '<tool_call>\n{"name": "search", "arguments": {"path": "b'


@pytest.fixture
def readings(monkeypatch):
    """How many times the whole reader ran (the real one, counted)."""
    count = [0]
    real = prompting.parse_tool_calls

    def counted(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(prompting, "parse_tool_calls", counted)
    return count


@pytest.mark.parametrize("answer", [BLOCK * 3 + CUT, BLOCK * 3, "Ok." + BLOCK + "Then" + CUT])
def test_a_cut_answer_of_blocks_is_read_whole_once(readings, answer):
    _, content, calls = split_answer(answer, AnswerFormat(), TOOLS, cut=True)
    assert readings[0] == 1
    stream = AnswerStream(AnswerFormat(), TOOLS)
    for i in range(0, len(answer), 3):
        stream.feed(answer[i:i + 3])
    _, rest, got = stream.finish(answer, cut=True)
    assert readings[0] == 2 and got == calls


def test_the_calls_are_read_as_before(readings):
    """The second reading still tells a block after Mistral's calls (text) from the blocks' own."""
    fmt = AnswerFormat(mistral_calls=True)
    _, content, calls = split_answer('[TOOL_CALLS]read_file[ARGS]{"path": "a.py"} ' + CUT, fmt, TOOLS, cut=True)
    assert [c["name"] for c in calls] == ["read_file"] and content.startswith("<tool_call>")
    _, content, calls = split_answer(BLOCK + CUT, fmt, TOOLS, cut=True)
    assert [(c["name"], c.get("cut")) for c in calls] == [("read_file", None), ("search", True)]
    assert readings[0] == 4
