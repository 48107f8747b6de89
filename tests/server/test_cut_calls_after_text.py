"""A call the length limit cut that was written after text that follows whole calls stays text, as the whole
reader leaves such a call when the same answer is not cut: Mistral's `[TOOL_CALLS]`, GLM's and Seed-OSS's
readers take a run of calls with nothing but whitespace between (call_runs.read_call_run, llama.cpp's
reading), and a call after text that follows the run is the content. The cut readers read the cut call only
where that run gets to (call_runs.unread_call); before, `[TOOL_CALLS]read_file[ARGS]{...} Then this:
[TOOL_CALLS]search[ARGS]{"path": "b` came back as the whole call plus a cut call of search (and the content
"Then this:"), where its whole form gives the whole call and the text. Split and streamed as the APIs read
the answer (OpenAI, Anthropic and Responses all go through split_answer / AnswerStream)."""

from __future__ import annotations

import pytest
from strata.engine.glm import read_cut_glm_call
from strata.engine.mistral import read_cut_mistral_call
from strata.engine.seed import read_cut_seed_call
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    for name in ("read_file", "search")]
OFFERED = {"read_file", "search"}
TYPES = {name: {"path": "string"} for name in OFFERED}
WHOLE = {"name": "read_file", "arguments": '{"path": "a.py"}'}

# format: (answer format, cut reader, the whole call of read_file a.py, a call of search b.py)
FORMATS = {
    "mistral": (AnswerFormat(mistral_calls=True), lambda t: read_cut_mistral_call(t, OFFERED),
                '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}', '[TOOL_CALLS]search[ARGS]{"path": "b.py"}'),
    "glm": (AnswerFormat(glm_calls=True), lambda t: read_cut_glm_call(t, OFFERED, TYPES),
            "<tool_call>read_file<arg_key>path</arg_key><arg_value>a.py</arg_value></tool_call>",
            "<tool_call>search<arg_key>path</arg_key><arg_value>b.py</arg_value></tool_call>"),
    "seed": (AnswerFormat(seed_calls=True), lambda t: read_cut_seed_call(t, OFFERED, TYPES),
             "<seed:tool_call><function=read_file><parameter=path>a.py</parameter></function></seed:tool_call>",
             "<seed:tool_call><function=search><parameter=path>b.py</parameter></function></seed:tool_call>"),
}


def streamed(answer: str, fmt: AnswerFormat, step: int) -> tuple[str, list]:
    """(the text the stream sent, its calls) of the cut answer fed in pieces of `step` characters."""
    s = AnswerStream(fmt, TOOLS)
    sent = "".join(t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text")
    tail, rest, calls = s.finish(answer, cut=True)
    return sent + "".join(t for k, t in tail if k == "text") + rest, calls


@pytest.mark.parametrize("before", ["", "Reading it. "])
@pytest.mark.parametrize("name", FORMATS)
def test_a_cut_call_after_text_that_follows_whole_calls_is_text_as_the_whole_reader_leaves_it(name, before):
    fmt, read_cut, whole, later = FORMATS[name]
    head = before + whole + " Then this: "
    answer = head + later
    text = lambda end: "\n".join(p for p in (before.strip(), answer[len(before + whole):end].strip()) if p)  # noqa: E731
    # the whole answer: the first call, then the text with the later call's markup in it
    assert split_answer(answer, fmt, TOOLS) == (None, text(len(answer)), [WHOLE])
    for end in range(len(head) + 1, len(answer)):
        cut = answer[:end]
        assert read_cut(cut) is None, cut
        assert split_answer(cut, fmt, TOOLS, cut=True) == (None, text(end), [WHOLE]), cut
        for step in (1, 3):
            assert streamed(cut, fmt, step) == (text(end), [WHOLE]), (cut, step)


@pytest.mark.parametrize("name", FORMATS)
def test_a_cut_call_right_after_whole_calls_is_still_read(name):
    # guard: with only whitespace between, the whole reader's run goes on to the cut call (a cut call)
    fmt, _, whole, later = FORMATS[name]
    answer = "Reading it.\n" + whole + "\n" + later[:later.index("b.py") + 1]
    cut = {"name": "search", "arguments": '{"path": "b', "cut": True}
    assert split_answer(answer, fmt, TOOLS, cut=True) == (None, "Reading it.", [WHOLE, cut])
    for step in (1, 3):
        assert streamed(answer, fmt, step) == ("Reading it.", [WHOLE, cut])


@pytest.mark.parametrize(("name", "block"), [
    ("glm", '<tool_call>{"name": "search", "arguments": {"path": "b'),      # Hermes' JSON block, cut
    ("glm", "<tool_call>"),                                                 # only its opening tag
    ("mistral", '<tool_call>{"name": "search", "arguments": {"path": "b'),
])
def test_a_cut_tool_call_block_after_another_formats_whole_calls_is_text(name, block):
    # parse_tool_calls reads `<tool_call>` JSON blocks only when the Mistral / GLM / Seed-OSS readers read no
    # call: after their whole calls such a block is text, cut or not (the blocks' cut reader gave a call)
    fmt, _, whole, _ = FORMATS[name]
    answer = whole + " Then this: " + block
    assert split_answer(answer, fmt, TOOLS, cut=True) == (None, "Then this: " + block, [WHOLE])
    for step in (1, 3):
        assert streamed(answer, fmt, step) == ("Then this: " + block, [WHOLE])
