"""Every cut of an answer reads as the answer not cut, as far as it got: at each point the length limit can
end an answer with two calls (every call format the server reads), the calls read from the cut answer are
the whole answer's first calls exactly (ids too; the first one once the second began), then at most one
cut call: the next whole call's name, its arguments a beginning of that call's (or all of them), its id the
model's or none. A cut reader that
reads a call the whole reader leaves as text (94ab509), gives a new id for the model's (4e27856) or drops
a list's whole calls (1d15953) breaks it. Streamed in 1 / 3-character pieces, the same calls and text."""

from __future__ import annotations

import pytest
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    for name in ("read_file", "search")]
MISTRAL, GLM, SEED, PLAIN = (AnswerFormat(mistral_calls=True), AnswerFormat(glm_calls=True),
                             AnswerFormat(seed_calls=True), AnswerFormat())
A, B = '{"path": "a.py"}', '{"path": "b.py"}'
GLM_A = "<tool_call>read_file<arg_key>path</arg_key><arg_value>a.py</arg_value></tool_call>"
GLM_B = "<tool_call>search<arg_key>path</arg_key><arg_value>b.py</arg_value></tool_call>"
SEED_A = "<seed:tool_call><function=read_file><parameter=path>a.py</parameter></function></seed:tool_call>"
SEED_B = "<seed:tool_call><function=search><parameter=path>b.py</parameter></function></seed:tool_call>"

ANSWERS = [
    (MISTRAL, f"Reading.[TOOL_CALLS]read_file[ARGS]{A}[TOOL_CALLS]search[ARGS]{B}"),
    (MISTRAL, f"[TOOL_CALLS]read_file[ARGS]{A} Then: [TOOL_CALLS]search[ARGS]{B}"),
    (MISTRAL, f"[TOOL_CALLS]read_file[CALL_ID]abcDEF123[ARGS]{A}\n[TOOL_CALLS]search[CALL_ID]xyzXYZ789[ARGS]{B}"),
    (MISTRAL, f'[TOOL_CALLS][{{"name": "read_file", "arguments": {A}, "id": "abcDEF123"}}, '
              f'{{"name": "search", "arguments": {B}}}]'),
    (PLAIN, f'[{{"name": "read_file", "arguments": {A}}}, {{"name": "search", "arguments": {B}}}]'),
    (PLAIN, f'<|python_tag|>[{{"name": "read_file", "parameters": {A}}}, {{"name": "search", "parameters": {B}}}]'),
    (PLAIN, f'Ok.<tool_call>\n{{"name": "read_file", "arguments": {A}}}\n</tool_call>\n'
            f'<tool_call>\n{{"name": "search", "arguments": {B}}}\n</tool_call>'),
    (GLM, f"Ok.\n{GLM_A}\n{GLM_B}"),
    (GLM, f"{GLM_A} Then: {GLM_B}"),
    (SEED, f"Ok.{SEED_A}{SEED_B}"),
    (SEED, f"{SEED_A} Then: {SEED_B}"),
]


def agrees(got: list[dict], whole: list[dict]) -> bool:
    """Whether the cut answer's calls are the whole answer's first ones, then at most one cut call that
    begins the next."""
    *done, last = got or [{}]
    if not last.get("cut"):
        done, last = got, None
    if done != whole[:len(done)]:
        return False
    if last is None:
        return True
    nxt = whole[len(done)]
    return (last["name"] == nxt["name"] and nxt["arguments"].startswith(last["arguments"])
            and last.get("id") in (None, nxt.get("id")))


@pytest.mark.parametrize(("fmt", "answer"), ANSWERS)
def test_every_cut_reads_as_the_answer_not_cut_as_far_as_it_got(fmt, answer):
    _, _, whole = split_answer(answer, fmt, TOOLS)
    assert [c["name"] for c in whole] in (["read_file", "search"], ["read_file"])     # the answer reads
    # where the second call begins: from there on the first one was written whole and is read whole
    second = max(answer.rfind(m) for m in ("[TOOL_CALLS]", "<tool_call>", "<seed:tool_call>", '{"name": "search"'))
    for end in range(1, len(answer)):
        cut = answer[:end]
        _, content, calls = split_answer(cut, fmt, TOOLS, cut=True)
        assert agrees(calls, whole), (cut, calls)
        assert end <= second or calls[:1] == whole[:1], (cut, calls)
        for step in (1, 3):
            s = AnswerStream(fmt, TOOLS)
            sent = "".join(t for i in range(0, end, step) for k, t in s.feed(cut[i:i + step]) if k == "text")
            tail, rest, got = s.finish(cut, cut=True)
            assert (sent + "".join(t for k, t in tail if k == "text") + rest, got) == (content, calls), (cut, step)
