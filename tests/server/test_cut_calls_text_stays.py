"""Review of 94ab509 / 4e27856 / 1d15953 / dcf9a11 / b66f1c9: text that follows whole calls and names a
call's marker (prose, or code), cut by the length limit at every point, never becomes a cut call; split
and streamed (1 / 3 characters) read the same text and calls, and no text the stream sent is taken back
(the content begins with it). An example in a code block opened after prose that the cut leaves open
is text, not a call (the model was still writing the block: prompting.ended). Also the sites that ask code_fences whether a marker is
in a code block (gate, cut reader, whole reader) read an answer with many such markers as before."""

from __future__ import annotations

import pytest
from strata.engine.code_fences import CodeScan, in_code_block
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}} for name in ("read_file", "search")]
MISTRAL, GLM, SEED, PLAIN = (AnswerFormat(mistral_calls=True), AnswerFormat(glm_calls=True),
                             AnswerFormat(seed_calls=True), AnswerFormat())
A = '{"path": "a.py"}'
M_A = f"[TOOL_CALLS]read_file[ARGS]{A}"
GLM_A = "<tool_call>read_file<arg_key>path</arg_key><arg_value>a.py</arg_value></tool_call>"
SEED_A = "<seed:tool_call><function=read_file><parameter=path>a.py</parameter></function></seed:tool_call>"
TC_A = f'<tool_call>\n{{"name": "read_file", "arguments": {A}}}\n</tool_call>'

# prose naming a marker right after the calls (nothing but whitespace between: where a cut call is read)
PROSE = [
    (MISTRAL, f"{M_A}\n[TOOL_CALLS] is how I open a call, then its name and [ARGS]."),
    (MISTRAL, f"{M_A} [TOOL_CALLS] and [CALL_ID] are markers, search is a tool."),
    (GLM, f"{GLM_A}\n<tool_call> opens each call, then the name and <arg_key> pairs."),
    (GLM, f"{GLM_A} <tool_call> read file <arg_key> path"),
    (SEED, f"{SEED_A}\n<seed:tool_call> opens a block; then <function=NAME> and so on."),
    (SEED, f"{SEED_A}<seed:tool_call> is <function= the tag"),
    (PLAIN, f"{TC_A}\nIn my format <tool_call> opens a call and {{ \"name\" follows."),
    (MISTRAL, f"Reading it. {M_A}\nThen [TOOL_CALLS] may follow."),
]
# code naming a marker after the calls, followed by more text
CODE = [
    (MISTRAL, f'{M_A}\n```\n[TOOL_CALLS]search[ARGS]{{"path": "x"}}\n```\nThat is the format.'),
    (GLM, f"{GLM_A}\n```xml\n<tool_call>search<arg_key>path</arg_key><arg_value>x</arg_value></tool_call>\n```\nSo."),
    (SEED, f"{SEED_A}\n```\n<seed:tool_call><function=search><parameter=path>x</parameter></function>\n```\nSo."),
    (PLAIN, f'{TC_A}\nExample:\n```\n<tool_call>\n{{"name": "search", "arguments": {{"path": "x"}}}}\n</tool_call>\n```\nOk.'),
]


def called(answer: str) -> int:
    """Where the answer's call ends: the cut points from there on are in the text after it."""
    return max(answer.find(c) + len(c) for c in (M_A, GLM_A, SEED_A, TC_A) if c in answer)


def read_cut(fmt: AnswerFormat, cut: str) -> tuple[str, list[dict]]:
    """The cut answer's (content, calls), split and streamed by 1 / 3 characters: the same, and what the
    stream sent before its end is where the content begins."""
    _, content, calls = split_answer(cut, fmt, TOOLS, cut=True)
    for step in (1, 3):
        stream = AnswerStream(fmt, TOOLS)
        sent = "".join(t for i in range(0, len(cut), step) for k, t in stream.feed(cut[i:i + step]) if k == "text")
        tail, rest, got = stream.finish(cut, cut=True)
        assert (sent + "".join(t for k, t in tail if k == "text") + rest, got) == (content, calls), (cut, step)
        assert content.startswith(sent) or content.startswith(sent.lstrip()), (cut, step, sent)
    return content, calls


@pytest.mark.parametrize(("fmt", "answer"), PROSE)
def test_prose_naming_a_marker_after_calls_is_never_a_cut_call(fmt, answer):
    _, whole_content, whole = split_answer(answer, fmt, TOOLS)
    assert [c["name"] for c in whole] == ["read_file"]
    for end in range(called(answer), len(answer) + 1):
        content, calls = read_cut(fmt, answer[:end])
        assert not any(c.get("cut") for c in calls), answer[:end]
        assert calls == whole, answer[:end]
        assert whole_content.startswith(content), (answer[:end], content)     # the text, as far as it got


@pytest.mark.parametrize(("fmt", "answer"), CODE)
def test_code_naming_a_marker_after_calls_is_never_a_call_when_cut(fmt, answer):
    """The example's call is not run at any cut: inside its code block (the closing fence not written) the
    model was still writing it (prompting.ended); the whole answer reads it as text too."""
    _, whole_content, whole = split_answer(answer, fmt, TOOLS)
    assert [c["name"] for c in whole] == ["read_file"]
    closed = answer.rindex("```") + 3          # its closing fence written: ends the answer as read whole
    for end in range(called(answer), len(answer) + 1):
        content, calls = read_cut(fmt, answer[:end])
        if closed <= end and not answer[closed:end].strip():
            assert calls == split_answer(answer[:end], fmt, TOOLS)[2], answer[:end]
            continue
        assert calls == whole, answer[:end]
        assert whole_content.startswith(content), (answer[:end], content)


@pytest.mark.parametrize("answer", [
    'Example of a call:\n```\n<tool_call>\n{"name": "search", "arguments": {"path": "x"}}\n</tool_call>\nThen.',
    'Like so:\n```json\n{"name": "search", "arguments": {"path": "x"}}\n```\nThat is all.',
])
def test_an_example_cut_inside_its_code_block_is_text(answer):
    """Before any call: every cut of an example in a code block after prose is text (it was a call of
    search when the cut fell after its </tool_call>, the block still open: closing_block read it as the
    answer's calls, as for an answer that ends so)."""
    for end in range(1, len(answer) + 1):
        content, calls = read_cut(PLAIN, answer[:end])
        assert (content.strip(), calls) == (answer[:end].strip(), []), answer[:end]


@pytest.mark.parametrize(("answer", "content"), [
    ('Sure.\n```xml\n<tool_call>\n{"name": "search", "arguments": {"path": "x"}}\n</tool_call>\n```', "Sure."),
    ('```xml\n<tool_call>\n{"name": "search", "arguments": {"path": "x"}}\n</tool_call>\n', ""),
])
def test_a_call_block_closed_or_opening_the_answer_is_still_a_call_when_cut(answer, content):
    """Guards: a block whose closing fence was written ends the answer as before (only what followed was
    cut), and a block that opens the answer is not an example (code_fences.py): the call."""
    assert read_cut(PLAIN, answer) == (content, [{"name": "search", "arguments": '{"path": "x"}'}])


def test_markers_in_many_code_blocks_read_as_before():
    """The gate, the cut reader and the whole reader ask CodeScan at each marker (each line read once);
    an answer of 120 code blocks naming the marker, then a call in the open: the same reading as a fresh
    in_code_block at every marker."""
    block = "Like this:\n```\n<tool_call>\n{\"name\": \"search\"}\n</tool_call>\n```\n"
    answer = "Intro.\n" + block * 120 + TC_A + "\n" + TC_A[:40]
    content, calls = read_cut(PLAIN, answer)
    assert [(c["name"], c.get("cut")) for c in calls] == [("read_file", None), ("read_file", True)]
    assert content == ("Intro.\n" + block * 120).strip()
    scan = CodeScan()
    marks = [i for i in range(len(answer)) if answer.startswith("<tool_call>", i)]
    assert [scan(answer[:i]) for i in marks] == [in_code_block(answer[:i]) for i in marks]
    assert sum(scan(answer[:i]) for i in marks) == 120
    assert scan(answer[:10]) == in_code_block(answer[:10])      # a shorter prefix: read again from the start
