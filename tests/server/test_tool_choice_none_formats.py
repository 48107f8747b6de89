"""tool_choice none on other call formats, through the real SDKs on scripted tiny models: the tools are written
as under `auto` (the same prompt) and the call's opening is refused where its reader would take it, so the
answer carries no call (server/no_call_rule.py). gpt-oss's Harmony (test_harmony_live.py's model: its analysis,
then a call whose header token writes `to=functions.get_weather`): refused outside the analysis, on chat, the
Responses API and Anthropic's. Ministral 3 (test_mistral_live.py's: `[THINK]...[/THINK]Reading it.` then the
`[TOOL_CALLS]` token): the token banned after the reasoning, the text before it kept. A Responses compaction's
summary (the tools in its prompt) is kept off calls alike (Mistral Small 3.2's scripted call)."""

from __future__ import annotations

import pytest
from strata.server.compaction import unseal

from tests.server.live import sdk_clients
from tests.server.test_harmony_live import (
    ASK,
    CALL_SCRIPT,
    CLAUDE_TOOLS,
    THOUGHT,
    TOOLS,
    harmony_server,
    no_markup,
)
from tests.server.test_mistral_live import MINISTRAL3, MSGS, SMALL32, THINKING, WITH_ID, mistral_server
from tests.server.test_mistral_live import RESPONSES_TOOLS as MISTRAL_RESPONSES_TOOLS
from tests.server.test_mistral_live import TOOLS as MISTRAL_TOOLS

RESPONSES_TOOLS = [{"type": "function", **TOOLS[0]["function"]}]


@pytest.fixture(scope="module")
def caller(tiny_model_factory):
    with harmony_server(tiny_model_factory, CALL_SCRIPT) as server:
        yield server


def test_chat_none_keeps_the_header_off(caller):
    oai, _ = sdk_clients(caller)
    auto = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=40)
    assert auto.choices[0].finish_reason == "tool_calls"                # the model calls under auto
    none = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="none", temperature=0,
                                       max_tokens=40)
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens         # the tools written all the same
    assert none.usage.prompt_tokens_details.cached_tokens >= none.usage.prompt_tokens - 1
    message = none.choices[0].message
    assert not message.tool_calls and none.choices[0].finish_reason in ("stop", "length"), message
    assert message.model_extra["reasoning_content"] == THOUGHT          # the analysis is free
    assert "to=functions" not in (message.content or "")
    no_markup(message.content or "")


def test_responses_and_messages_none_keep_the_header_off(caller):
    oai, claude = sdk_clients(caller)
    auto = oai.responses.create(model="m", input=ASK, tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=40)
    assert [o.type for o in auto.output if o.type == "function_call"] == ["function_call"], auto.output
    r = oai.responses.create(model="m", input=ASK, tools=RESPONSES_TOOLS, tool_choice="none", temperature=0,
                             max_output_tokens=40)
    assert r.usage.input_tokens == auto.usage.input_tokens
    assert [o.type for o in r.output if o.type == "function_call"] == [], r.output
    assert "to=functions" not in r.output_text
    shown = claude.messages.count_tokens(model="m", messages=ASK, tools=CLAUDE_TOOLS).input_tokens
    m = claude.messages.create(model="m", max_tokens=40, messages=ASK, tools=CLAUDE_TOOLS,
                               tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == shown
    assert m.stop_reason in ("end_turn", "max_tokens") and "tool_use" not in [b.type for b in m.content], m.content


def test_mistral_none_bans_the_call_token_after_the_reasoning(tiny_model_factory):
    with mistral_server(tiny_model_factory, MINISTRAL3, THINKING) as s:
        oai, _ = sdk_clients(s)
        auto = oai.chat.completions.create(model="m", messages=MSGS, tools=MISTRAL_TOOLS, temperature=0,
                                           max_tokens=30)
        assert auto.choices[0].finish_reason == "tool_calls"
        none = oai.chat.completions.create(model="m", messages=MSGS, tools=MISTRAL_TOOLS, tool_choice="none",
                                           temperature=0, max_tokens=30)
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens
    message = none.choices[0].message
    assert not message.tool_calls and none.choices[0].finish_reason in ("stop", "length"), message
    assert message.model_extra["reasoning_content"] == "Need a.py."
    assert (message.content or "").startswith("Reading it.") and "[TOOL_CALLS]" not in message.content, message


def test_a_compaction_summary_is_kept_off_calls(tiny_model_factory):
    """A Responses compaction writes the summary with the conversation's tools in the prompt: a model that
    would call instead (Mistral Small 3.2's scripted call) left no summary; its call's token is banned as
    under tool_choice none, so the summary is its text."""
    with mistral_server(tiny_model_factory, SMALL32, WITH_ID) as s:
        oai, _ = sdk_clients(s)
        auto = oai.responses.create(model="m", input=MSGS[1:], instructions=MSGS[0]["content"],
                                    tools=MISTRAL_RESPONSES_TOOLS, temperature=0, max_output_tokens=30)
        assert [o.type for o in auto.output] == ["function_call"], auto.output     # the model calls
        r = oai.responses.compact(model="m", input=MSGS[1:], instructions=MSGS[0]["content"],
                                  extra_body={"tools": MISTRAL_RESPONSES_TOOLS, "max_output_tokens": 30})
    summary = unseal(r.output[-1].encrypted_content)
    assert summary and summary != "(the model wrote no summary)" and "[TOOL_CALLS]" not in summary, summary


# a summary that ends quoting the conversation's last call in a code block after its prose (the check leaves a
# marker in such a block free: an example), and one that is a bare JSON call (no marker to keep off)
QUOTED_CALL = ("Summary: the user asked for a.py.\nLast call:\n```\n", "<tool_call>",
               '\n{"name": "read_file", "arguments": {"path": "a.py"}}\n', "</tool_call>", "\n```")
BARE_CALL = ('{"name": "read_file", "arguments": {"path": "a.py"}}',)


@pytest.mark.parametrize("pieces", [QUOTED_CALL, BARE_CALL], ids=["quoted_call", "bare_call"])
def test_a_compaction_summary_is_read_as_text(tiny_model_factory, pieces):
    """No tool is callable in a compaction, so its summary is read as text, as tool_choice none's answer is:
    read with the call readers, a quoted call at its end was cut out of it, and a summary that was a bare
    JSON call left none ('(the model wrote no summary)')."""
    with mistral_server(tiny_model_factory, SMALL32, pieces, added=pieces) as s:
        oai, _ = sdk_clients(s)
        r = oai.responses.compact(model="m", input=MSGS[1:], instructions=MSGS[0]["content"],
                                  extra_body={"tools": MISTRAL_RESPONSES_TOOLS, "max_output_tokens": 60})
    assert unseal(r.output[-1].encrypted_content) == "".join(pieces).strip()
