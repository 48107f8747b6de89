"""Review of the cut-call readers of bb56bc3 / 479b10f / 88c59b4 (Mistral `[TOOL_CALLS]`, GLM
`<tool_call>NAME<arg_key>`, Seed-OSS, bare JSON): an answer the length limit cut that is ordinary text
stays the answer's text, whole, split and streamed (nothing sent twice, nothing dropped), as the whole
readers leave it: prose that names a format's marker, a JSON answer (response_format json_object /
json_schema with tools offered: nothing holds it) whose "name" is an offered tool's but that has no
"arguments" / "parameters" (parse_tool_calls' _as_call reads none as a call), tool_choice none (the APIs
pass no tools), a vocabulary without the markers. The cut calls themselves: test_cut_calls*.py."""

from __future__ import annotations

import pytest
from strata.engine.cut_call import read_cut_bare_call
from strata.server.prompting import AnswerFormat, AnswerStream, split_answer

TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}
    for name in ("read_file", "search")]
OFFERED = {"read_file", "search"}
MISTRAL = AnswerFormat(mistral_calls=True)
GLM = AnswerFormat(glm_calls=True)
SEED = AnswerFormat(seed_calls=True)


def split_and_streamed(answer: str, fmt: AnswerFormat, tools: list[dict] | None) -> list[tuple[str, list]]:
    """(content, calls) as split_answer reads the cut answer, then as streamed in pieces of 1 and 5
    characters (the text deltas sent as they came + what finish sends)."""
    out = [split_answer(answer, fmt, tools, cut=True)[1:]]
    for step in (1, 5):
        s = AnswerStream(fmt, tools)
        texts = [t for i in range(0, len(answer), step) for k, t in s.feed(answer[i:i + step]) if k == "text"]
        tail, rest, calls = s.finish(answer, cut=True)
        out.append(("".join(texts) + "".join(t for k, t in tail if k == "text") + rest, calls))
    return out


PROSE = [
    (MISTRAL, "Mistral's models write [TOOL_CALLS] before a call, then the tool's name and [ARGS]. For exa"),
    (MISTRAL, "The token [TOOL_CALLS] opens a call; the parser then rea"),
    (GLM, "GLM opens each call with <tool_call> and then writes the function's na"),
    (GLM, "Use <tool_call> then the name, then <arg_key>path</arg_key> and its val"),
    (SEED, "Seed-OSS writes <seed:tool_call> and then a function tag: <function=read_file> with its para"),
]


@pytest.mark.parametrize(("fmt", "answer"), PROSE)
def test_prose_naming_a_marker_stays_text(fmt, answer):
    for got in split_and_streamed(answer, fmt, TOOLS):
        assert got == (answer, [])


JSON_ANSWERS = [
    '{"name": "read_file", "description": "Reads a file from the disk and gives back its te',
    '{"name": "search", "results": [{"title": "Paris", "url": "https://ex',
    '```json\n{"name": "search", "kind": "tool", "summary": "finds th',
    '{"name": "read_file", "argumentation": "it is the be',
]


@pytest.mark.parametrize("answer", JSON_ANSWERS)
def test_a_json_answer_that_is_no_call_stays_text(answer):
    # parse_tool_calls reads a bare JSON object as a call only with "arguments" / "parameters": a JSON
    # answer (response_format, unheld with tools offered) with an offered tool's "name" and other members
    # is the answer, cut or not
    assert read_cut_bare_call(answer, OFFERED) is None
    for fmt in (AnswerFormat(), MISTRAL):
        for got in split_and_streamed(answer, fmt, TOOLS):
            assert got == (answer, [])


@pytest.mark.parametrize("answer", [
    '{"name": "read_file"',                                  # cut after the name: may be a call's
    '{"name": "read_file", ',
    '{"name": "read_file", "argu',                           # cut in the key
    '{"name": "read_file", "parameters',
    '{"name": "read_file", "arguments": {"path": "a',
])
def test_a_json_call_cut_before_or_in_its_arguments_key_is_still_a_call(answer):
    assert [c["name"] for c in read_cut_bare_call(answer, OFFERED)[1]] == ["read_file"]


@pytest.mark.parametrize(("fmt", "answer"), [
    (MISTRAL, 'Reading it.[TOOL_CALLS]read_file[ARGS]{"path": "src/ma'),
    (GLM, "Reading it.<tool_call>read_file<arg_key>path</arg_key><arg_value>src/ma"),
    (SEED, "Reading it.<seed:tool_call><function=read_file><parameter=path>src/ma"),
    (AnswerFormat(), '{"name": "read_file", "arguments": {"path": "src/ma'),
])
def test_no_tools_offered_no_call(fmt, answer):
    # tool_choice none: the APIs pass no tools (openai_api / anthropic_api); the text stays whole
    assert split_answer(answer, fmt, None, cut=True) == (None, answer, [])
    s = AnswerStream(fmt, None)
    texts = [t for k, t in s.feed(answer) if k == "text"]
    tail, rest, calls = s.finish(answer, cut=True)
    assert ("".join(texts) + "".join(t for k, t in tail if k == "text") + rest, calls) == (answer, [])


@pytest.mark.parametrize("answer", [
    'Reading it.[TOOL_CALLS]read_file[ARGS]{"path": "src/ma',
    "Reading it.<seed:tool_call><function=read_file><parameter=path>src/ma",
    "Reading it.<tool_call>read_file<arg_key>path</arg_key><arg_value>src/ma",     # GLM's, without <arg_key>
])
def test_a_vocabulary_without_the_marker_keeps_the_text(answer):
    for got in split_and_streamed(answer, AnswerFormat(), TOOLS):
        assert got == (answer, [])


@pytest.mark.parametrize(("fmt", "answer"), [
    (AnswerFormat(), 'Here is an example:\n```json\n{"name": "read_file", "arguments": {"path": "a'),  # after prose
    (AnswerFormat(), 'Call it as {"name": "read_file", "arguments": {"pa'),                          # mid-text
    (AnswerFormat(), '```json\n{"name": "read_file", "arguments": {}}\n```\nThat is how a call looks. The ne'),
    (AnswerFormat(), '[{"name": "read_file", "arguments": {}}]\n\nThe list above calls it; the nex'),
    (AnswerFormat(), "<|python_tag|>import math\nprint(math.sq"),                       # Llama's code, no JSON
    (MISTRAL, 'Example:\n```\n[TOOL_CALLS]read_file[ARGS]{"path": "a'),
    (GLM, "Example:\n```\n<tool_call>read_file<arg_key>path</arg_key><arg_value>a"),
    (SEED, "Example:\n```\n<seed:tool_call><function=read_file><parameter=path>a"),
])
def test_calls_quoted_in_code_or_text_stay_text(fmt, answer):
    for got in split_and_streamed(answer, fmt, TOOLS):
        assert got == (answer, [])


EVERY_CUT = [
    (MISTRAL, 'Reading it. [TOOL_CALLS]read_file[ARGS]{"path": "a.py"} Then this: [TOOL_CALLS]search[ARGS]{"path": "b [x]"}'),
    (MISTRAL, 'Here:\n```\n[TOOL_CALLS]read_file[ARGS]{"path": "x"}\n```\nDone; [TOOL_CALLS] is the token.'),
    (MISTRAL, '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a.py"}}, {"name": "search", "arguments": {}}]'),
    (GLM, "Look.<tool_call>read_file<arg_key>path</arg_key><arg_value>a <b> c</arg_value></tool_call> then "
          "<tool_call>search<arg_key>path</arg_key><arg_value>q</arg_value></tool_call>"),
    (SEED, "Ok.<seed:tool_call><function=read_file><parameter=path>a.py</parameter></function></seed:tool_call>"),
    (AnswerFormat(), '```json\n{"name": "search", "results": [1, 2]}\n```'),
    (AnswerFormat(), 'Sure.<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'),
]


@pytest.mark.parametrize(("fmt", "answer"), EVERY_CUT)
def test_every_cut_streams_as_it_splits_and_sends_nothing_it_takes_back(fmt, answer):
    # what the stream sent before the end is where the content begins: no markup sent and then read as a
    # call, no text sent twice
    for end in range(1, len(answer) + 1):
        cut = answer[:end]
        want = split_answer(cut, fmt, TOOLS, cut=True)[1:]
        for step in (1, 3):
            s = AnswerStream(fmt, TOOLS)
            sent = "".join(t for i in range(0, end, step) for k, t in s.feed(cut[i:i + step]) if k == "text")
            tail, rest, calls = s.finish(cut, cut=True)
            assert want[0].startswith(sent.strip()), cut
            assert (sent + "".join(t for k, t in tail if k == "text") + rest, calls) == want, cut
