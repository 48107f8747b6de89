"""A bare JSON call (or list of calls) in a ```` ``` ```` / ```` ```json ```` fence, written whole, whose
closing fence the length limit cut, is the calls the whole reader reads once the fence closes (review of
1d15953: read_cut_bare_call took a whole value as 'read whole already', but the whole reader reads a
fenced block only closed, so the answer came back as its markup text and no call, in every API). A JSON
answer that is no call, or text after the value, stays the text. Split and streamed (1 / 3 characters)."""

from __future__ import annotations

import pytest
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}} for name in ("read_file", "search")]
A = '{"name": "read_file", "arguments": {"path": "a.py"}}'
B = '{"name": "search", "arguments": {"path": "b.py"}}'
READ_A = {"name": "read_file", "arguments": '{"path": "a.py"}'}
SEARCH_B = {"name": "search", "arguments": '{"path": "b.py"}'}
PLAIN = AnswerFormat()


def read(fmt: AnswerFormat, answer: str) -> tuple[str, list[dict]]:
    _, content, calls = split_answer(answer, fmt, TOOLS, cut=True)
    for step in (1, 3):
        stream = AnswerStream(fmt, TOOLS)
        sent = "".join(t for i in range(0, len(answer), step) for k, t in stream.feed(answer[i:i + step])
                       if k == "text")
        tail, rest, got = stream.finish(answer, cut=True)
        assert (sent + "".join(t for k, t in tail if k == "text") + rest, got) == (content, calls), step
    return content, calls


@pytest.mark.parametrize(("fmt", "answer", "calls"), [
    (PLAIN, f"```json\n{A}\n", [READ_A]),
    (PLAIN, f"```json\n{A}\n``", [READ_A]),
    (PLAIN, f"```\n{A}", [READ_A]),
    (PLAIN, f"```json\n[{A}, {B}]\n`", [READ_A, SEARCH_B]),
    (PLAIN, f"<|python_tag|>```json\n[{A}]\n", [READ_A]),
    (PLAIN, f'[TOOL_CALLS]```json\n[{A[:-1]}, "id": "abcDEF123"}}]\n', [{**READ_A, "id": "abcDEF123"}]),
    (PLAIN, f'```json\n{A.replace("read_file", "delete_all")}\n', [{**READ_A, "name": "delete_all"}]),
])
def test_a_fenced_call_cut_in_its_closing_fence_is_the_call(fmt, answer, calls):
    assert read(fmt, answer) == ("", calls)
    closed = answer.rstrip("`").rstrip() + "\n```"          # as the whole reader reads it closed
    assert split_answer(closed, fmt, TOOLS)[1:] == ("", calls)


@pytest.mark.parametrize("answer", [
    '```json\n{"name": "read_file", "results": [1, 2]}\n',      # a JSON answer, no call
    '```json\n[{"name": "read_file", "arguments": {}}, 3]\n`',  # an element that is no call
    f"```json\n{A}\nand then more text",                        # text after the value
    f"```json\n{A}\n```\nand then",                             # the block closed, then text
    f"Here:\n```json\n{A}\n",                                   # a fence after prose
    f"```python\n{A}\n",                                        # not a JSON fence
])
def test_other_fenced_answers_stay_text(answer):
    content, calls = read(PLAIN, answer)
    assert (content.strip(), calls) == (answer.strip(), [])


def test_every_cut_of_a_fenced_list_reads_as_far_as_it_got():
    """From the list's `]` on, the whole calls; before, the whole ones and at most one cut one."""
    answer = f"```json\n[{A}, {B}]\n```"
    whole = split_answer(answer, PLAIN, TOOLS)[2]
    assert whole == [READ_A, SEARCH_B]
    for end in range(answer.index(B) + len(B) + 1, len(answer) + 1):
        assert read(PLAIN, answer[:end])[1] == whole, answer[:end]
    for end in range(1, answer.index(B) + len(B) + 1):
        calls = read(PLAIN, answer[:end])[1]
        done = [c for c in calls if not c.get("cut")]
        assert done == whole[:len(done)] and len(calls) - len(done) <= 1, answer[:end]
