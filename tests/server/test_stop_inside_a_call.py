"""A stop sequence that ends the answer inside a tool call: the call's markup is not the answer's text, and the
cut call is not given back (the stop reason, unlike the length one, does not say it is not whole: an agent would
run it); the text before it is the answer, the stop reason the stop sequence's. Found in session 39's new-user
trial: Anthropic's `stop_sequences: ["Par"]` with `tool_choice: any` answered the text block
`<tool_call>\\n{"name": "get_weather", "arguments": {"city": "`. A stop sequence that cuts only the call's
closing tag (a client's `</tool_call>` stop) leaves a whole call, given back as one. Live, through the real
openai and anthropic SDKs, whole and streamed, on a tiny scripted model that writes prose then a call."""

from __future__ import annotations

import pytest

from tests.server.live import LiveServer, scripted_model, sdk_clients

PIECES = ("I will read it.", "\n<tool_call>\n", '{"name": "read_file", "arguments": ', '{"path": "a.py"}}',
          "\n</tool_call>")
READ_FILE = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]
A_TOOLS = [{"name": "read_file", "input_schema": READ_FILE[0]["function"]["parameters"]}]
ASK = [{"role": "user", "content": "Read a.py"}]


@pytest.fixture(scope="module")
def caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(PIECES), ctx_len=2048, n_vocab=512, added_tokens=PIECES)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


def _chat(oai, stop, stream=False):
    kw = dict(model="m", messages=ASK, tools=READ_FILE, max_tokens=20, temperature=0, stop=[stop])
    if not stream:
        r = oai.chat.completions.create(**kw).choices[0]
        calls = [(t.function.name, t.function.arguments) for t in r.message.tool_calls or ()]
        return r.message.content, calls, r.finish_reason
    chunks = [c for c in oai.chat.completions.create(stream=True, **kw) if c.choices]
    calls = [(t.function.name, t.function.arguments) for c in chunks for t in c.choices[0].delta.tool_calls or ()]
    return ("".join(c.choices[0].delta.content or "" for c in chunks) or None, calls,
            [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason][-1])


def _messages(claude, stop, stream=False):
    kw = dict(model="m", messages=ASK, tools=A_TOOLS, max_tokens=20, stop_sequences=[stop],
              extra_body={"temperature": 0})
    if stream:
        with claude.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = claude.messages.create(**kw)
    return [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in m.content], m.stop_reason


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_inside_a_call_leaves_the_text_before_it(caller, stream):
    oai, claude = caller
    assert _chat(oai, "a.py", stream) == ("I will read it.", [], "stop")
    assert _messages(claude, "a.py", stream) == ([("text", "I will read it.")], "stop_sequence")
    # cut before the call's name is whole: the same
    assert _chat(oai, '"read_file"', stream) == ("I will read it.", [], "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_at_the_calls_closing_tag_leaves_the_call(caller, stream):
    oai, claude = caller
    assert _chat(oai, "</tool_call>", stream) == ("I will read it.", [("read_file", '{"path": "a.py"}')],
                                                  "tool_calls")
    assert _messages(claude, "</tool_call>", stream) == \
        ([("text", "I will read it."), ("tool_use", ("read_file", {"path": "a.py"}))], "tool_use")


# ----- Qwen3-Coder's XML calls, which the reader takes without their closing tags -----

XML = ("I will read it.", "\n<tool_call>\n<function=read_file>\n", "<parameter=path>\n", "a.py",
       "\n</parameter>\n</function>\n", "</tool_call>")


@pytest.fixture(scope="module")
def xml_caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(XML), ctx_len=2048, n_vocab=512, added_tokens=XML)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_inside_an_xml_call_leaves_the_text_before_it(xml_caller, stream):
    """An XML call cut before its `</function>` was read as a call of the values written so far (`{"path": ""}`,
    finish_reason "tool_calls": an agent ran it); cut after it, the call is whole."""
    oai, claude = xml_caller
    assert _chat(oai, "a.py", stream) == ("I will read it.", [], "stop")
    assert _messages(claude, "a.py", stream) == ([("text", "I will read it.")], "stop_sequence")
    assert _chat(oai, "</tool_call>", stream) == ("I will read it.", [("read_file", '{"path": "a.py"}')],
                                                  "tool_calls")


# ----- the readers themselves, whole and streamed, for the cases a scripted model's one answer does not reach -----

TWO_TOOLS = READ_FILE + [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


def _read_stopped(text: str, fmt) -> tuple[tuple[str, list[dict]], tuple[str, list[dict]]]:
    """(content, calls) of an answer a stop sequence ended, as the whole reader and the stream read it."""
    from strata.server.prompting import AnswerStream, split_answer
    _, content, calls = split_answer(text, fmt, TWO_TOOLS, stopped=True)
    stream = AnswerStream(fmt, TWO_TOOLS)
    pieces = stream.feed(text)
    last, rest, streamed = stream.finish(text, stopped=True)
    return (content, calls), ("".join(p for kind, p in pieces + last if kind == "text") + rest, streamed)


def test_a_stop_inside_the_second_xml_function_of_one_block_leaves_out_that_function_alone():
    """Qwen3-Coder's reader takes several functions in one <tool_call> block: a stop sequence that cut the last
    before its </function> gave it back as a call of the values written so far ({"city": "Pa"}), since the block
    held a </function> (the first function's); now that function is left out, the whole one before it kept."""
    from strata.server.prompting import PLAIN
    text = ("I will look.\n<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</parameter>\n</function>\n"
            "<function=get_weather>\n<parameter=city>\nPa")
    whole = ("I will look.", [{"name": "read_file", "arguments": '{"path": "a.py"}'}])
    assert _read_stopped(text, PLAIN) == (whole, whole)
    # its </function> written (a </tool_call> stop): both calls whole
    both = ("I will look.", whole[1] + [{"name": "get_weather", "arguments": '{"city": "Paris"}'}])
    assert _read_stopped(text + "ris\n</parameter>\n</function>\n", PLAIN) == (both, both)


# ----- GLM's calls, whose values end with the closing tag alone -----

GLM = ("I will read it.", "\n<tool_call>read_file", "<arg_key>", "path", "</arg_key>", "<arg_value>", "a.py",
       "</arg_value>", "</tool_call>")     # <arg_key> a token of its own: the vocabulary's GLM calls are read


@pytest.fixture(scope="module")
def glm_caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(GLM), ctx_len=2048, n_vocab=512, added_tokens=GLM)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_at_a_glm_calls_closing_tag_leaves_the_call(glm_caller, stream):
    """A GLM call's arguments have no closing brace of their own: `</tool_call>` ends them. Its cut reader leaves
    the object open after the last `</arg_value>`, so a client's `</tool_call>` stop dropped the whole call (the
    answer 'I will read it.' and no call); the stop sequence is that closing tag, so the call is whole. A stop
    inside a value still leaves the call out."""
    oai, claude = glm_caller
    assert _chat(oai, "</tool_call>", stream) == ("I will read it.", [("read_file", '{"path": "a.py"}')],
                                                  "tool_calls")
    assert _messages(claude, "</tool_call>", stream) == \
        ([("text", "I will read it."), ("tool_use", ("read_file", {"path": "a.py"}))], "tool_use")
    assert _chat(oai, "a.py", stream) == ("I will read it.", [], "stop")


# ----- a call in a code block, whose closing fence is the client's stop sequence -----

FENCED = ("Let me look.", "\n```xml\n", "<tool_call>\n", '{"name": "read_file", "arguments": ', '{"path": "a.py"}}',
          "\n</tool_call>\n", "```\n", "Done.")


@pytest.fixture(scope="module")
def fenced_caller(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(FENCED), ctx_len=2048, n_vocab=512, added_tokens=FENCED)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_that_is_the_closing_fence_leaves_the_call_in_the_block(fenced_caller, stream):
    """A whole call in a code block after prose is a call once its fence closes. 21ea1be read every answer a stop
    sequence ended as one the length limit cut, inside a block still open (maybe an example): with a stop that is
    the block's closing fence (a client's "```\n" beside the model's ```xml opening) the whole call came back as
    text, where it was a call before 21ea1be. A stop sequence that closes the block now closes it; another one
    still leaves an open block's call as text."""
    oai, claude = fenced_caller
    assert _chat(oai, "```\n", stream) == ("Let me look.", [("read_file", '{"path": "a.py"}')], "tool_calls")
    assert _messages(claude, "```\n", stream) == \
        ([("text", "Let me look."), ("tool_use", ("read_file", {"path": "a.py"}))], "tool_use")
    content, calls, finish = _chat(oai, "</tool_call>\n`", stream)
    assert (calls, finish) == ([], "stop") and "<tool_call>" in content
