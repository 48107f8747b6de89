"""A call whose opening an Anthropic prefill wrote (the assistant message the answer continues ends inside
a `<tool_call>` block): the answer writes the rest of it, read together with the prefill's opening, as a
call when it reads as one; else the answer's text as the model wrote it (the opening stays the client's).
The default model, given the prefill `<tool_call>\n` and a read_file tool, wrote a call of it in 1 of 15
sampled answers (the others: `<function-name>` placeholders, names not offered), which came back as text:
the reader saw the answer alone, a bare JSON call followed by a closing tag. Live on a scripted tiny model
through the real anthropic SDK, whole, streamed and cut."""

from __future__ import annotations

import pytest
from strata.server.prompting import PLAIN, AnswerStream, split_answer

from tests.server.live import LiveServer, scripted_model, sdk_clients

TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}}}}]


REST = ('{"name": "read_file", "arguments": ', '{"path": "a.py"}}', "\n</tool_call>")
OPENED = [{"role": "user", "content": "Read a.py"}, {"role": "assistant", "content": "<tool_call>\n"}]
CLAUDE_READ_FILE = [{"name": "read_file", "input_schema": TOOLS[0]["function"]["parameters"]}]


@pytest.fixture(scope="module")
def continuer(tiny_model_factory):
    model = scripted_model(tiny_model_factory, "".join(REST), ctx_len=2048, n_vocab=512, added_tokens=REST)
    with LiveServer(model=str(model), ctx=1024, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield sdk_clients(s)[1]


def blocks(message) -> list:
    return [(b.type, b.text if b.type == "text" else (b.name, b.input)) for b in message.content]


def test_live_a_call_whose_opening_the_prefill_wrote_is_a_call(continuer):
    m = continuer.messages.create(model="m", max_tokens=20, messages=OPENED, tools=CLAUDE_READ_FILE,
                                  extra_body={"temperature": 0})
    assert (blocks(m), m.stop_reason) == ([("tool_use", ("read_file", {"path": "a.py"}))], "tool_use")
    with continuer.messages.stream(model="m", max_tokens=20, messages=OPENED, tools=CLAUDE_READ_FILE,
                                   extra_body={"temperature": 0}) as s:
        streamed = s.get_final_message()
    assert (blocks(streamed), streamed.stop_reason) == (blocks(m), "tool_use")
    # cut: the call as far as written (the limit came inside its arguments)
    m = continuer.messages.create(model="m", max_tokens=1, messages=OPENED, tools=CLAUDE_READ_FILE,
                                  extra_body={"temperature": 0})
    assert (blocks(m), m.stop_reason) == ([("tool_use", ("read_file", {}))], "max_tokens")
    # a prefill that does not open a call, or no tools: the answer's text as before
    plain = [OPENED[0], {"role": "assistant", "content": "Here:"}]
    m = continuer.messages.create(model="m", max_tokens=20, messages=plain, tools=CLAUDE_READ_FILE,
                                  extra_body={"temperature": 0})
    assert blocks(m) == [("text", "".join(REST))]
    m = continuer.messages.create(model="m", max_tokens=20, messages=OPENED, extra_body={"temperature": 0})
    assert blocks(m) == [("text", "".join(REST))]


def test_a_prefill_opened_block_that_is_no_call_is_the_answers_text_without_the_opening():
    from strata.server.prompting import open_call_block

    assert open_call_block("Let me look.\n<tool_call>\n") == "<tool_call>\n"
    assert open_call_block("<tool_call>{}</tool_call> ok") == open_call_block("no call") == ""
    assert open_call_block("Like this:\n```\n<tool_call>\n") == ""          # an example in a code block
    fmt = PLAIN.__class__(call_opened="<tool_call>\n")
    answer = "not a call\n</tool_call> then text"
    assert split_answer(answer, fmt, TOOLS) == (None, answer, [])
    s = AnswerStream(fmt, TOOLS)
    sent = "".join(t for k, t in s.feed(answer) if k == "text")
    _, rest, calls = s.finish(answer)
    assert (sent + rest, calls) == (answer, [])


@pytest.mark.parametrize("inside", ["a </tool_call> b", "see <tool_call> x", "a <TOOLCALL> b"])
def test_a_prefill_that_ends_inside_a_string_holding_a_tag_opens_the_call(inside):
    """The prefill's call is open inside its JSON string: a tag there is the string's (as the cut-call reader
    reads it). Before, a closing tag there left the call unopened and an opening tag opened a block of its own,
    so the answer's rest of the call came back as text."""
    from strata.server.prompting import open_call_block

    prefill = 'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "' + inside
    opened = open_call_block(prefill)
    assert opened == prefill[prefill.index("<tool_call>"):]
    fmt = PLAIN.__class__(call_opened=opened)
    answer = '.py"}}\n</tool_call>'
    call = {"name": "read_file", "arguments": '{"path": "' + inside + '.py"}'}
    assert split_answer(answer, fmt, TOOLS) == (None, "", [call])
    s = AnswerStream(fmt, TOOLS)
    sent = "".join(t for k, t in s.feed(answer) if k == "text")
    _, rest, calls = s.finish(answer)
    assert (sent + rest, calls) == ("", [call])
