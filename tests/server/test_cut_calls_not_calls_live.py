"""End to end through the real `openai` and `anthropic` SDKs and the Responses API: an answer the token limit
cut that is text, not a call, comes back as that text with tools offered (test_cut_calls_not_calls.py reads
the split and the stream alone). Scripted tiny models (tests/fixtures/tiny_gguf.py `script`) with Mistral
Small 3.2's template, whose vocabulary has `[TOOL_CALLS]`: a JSON answer (response_format json_object, not
held with tools offered) whose "name" is the offered tool's and whose next member is not its arguments: a
call of read_file with no content before 8b4c5d2. (Prose naming `[TOOL_CALLS]` cannot be written here: held
calls, structured_output.held_calls, hold what follows the marker to a tool's name.)"""

from __future__ import annotations

import pytest

from tests.server.live import LiveServer, sdk_clients
from tests.server.test_mistral_live import CLAUDE_TOOLS, MSGS, RESPONSES_TOOLS, SMALL32, TOOLS, mistral_model

JSON_ANSWER = ('{"name": "read_file", ', '"description": ', '"Reads a', ' file."}')


@pytest.fixture(scope="module")
def cut_text(tiny_model_factory):
    pieces = JSON_ANSWER
    model = mistral_model(tiny_model_factory, SMALL32, pieces, added=pieces)   # each piece one token
    with LiveServer(model=str(model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield (*sdk_clients(s), "".join(pieces[:3]))


def test_a_cut_answer_that_is_no_call_stays_text(cut_text):
    oai, claude, want = cut_text
    extra = {"response_format": {"type": "json_object"}}
    r = oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=3, **extra)
    c = r.choices[0]
    assert (c.finish_reason, c.message.content, c.message.tool_calls) == ("length", want, None)
    chunks = list(oai.chat.completions.create(model="m", messages=MSGS, tools=TOOLS, temperature=0, max_tokens=3,
                                              stream=True, **extra))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    assert "".join(d.content or "" for d in deltas) == want and not any(d.tool_calls for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "length"
    m = claude.messages.create(model="m", max_tokens=3, messages=MSGS[1:], tools=CLAUDE_TOOLS)
    with claude.messages.stream(model="m", max_tokens=3, messages=MSGS[1:], tools=CLAUDE_TOOLS) as st:
        final = st.get_final_message()
    for msg in (m, final):
        assert msg.stop_reason == "max_tokens"
        assert [(b.type, getattr(b, "text", None)) for b in msg.content] == [("text", want)]
    rr = oai.responses.create(model="m", input="show a.py", tools=RESPONSES_TOOLS, max_output_tokens=3)
    assert (rr.status, rr.output_text) == ("incomplete", want)
    assert [o.type for o in rr.output] == ["message"]
