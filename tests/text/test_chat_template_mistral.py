"""Mistral's real chat templates (llama.cpp's models/templates, copied to tests/fixtures/) rendered by our
sandbox with agent histories: system, user, a turn of several calls, their results, text, more turns.
Nemo's and Small 3.2's templates raise unless call ids are 9 alphanumerics: the ids agents send back
(`call_...`, `toolu_...`, none) are mapped (engine mistral.py), the same in a call and its result and on
every turn; Ministral 3's writes the reasoning back as [THINK]...[/THINK]."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from strata.engine.chat_template import ChatTemplate, ChatTemplateError
from strata.engine.mistral import short_call_id

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DEVSTRAL = "unsloth-mistral-Devstral-Small-2507.jinja"
SMALL32 = "Mistral-Small-3.2-24B-Instruct-2506.jinja"
MINISTRAL3 = "mistralai-Ministral-3-14B-Reasoning-2512.jinja"
NEMO = "mistralai-Mistral-Nemo-Instruct-2407.jinja"
ALL = (DEVSTRAL, SMALL32, MINISTRAL3, NEMO)

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                                          "required": ["path"]}}}]
ID_A, ID_B = "call_0123456789abcdef01234567", "toolu_01ABCDEFGHJKLMNOPQRSTU"
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Read a.py and b.py"},
    {"role": "assistant", "content": "", "reasoning_content": "Two reads.", "tool_calls": [
        {"id": ID_A, "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
        {"id": ID_B, "type": "function", "function": {"name": "read_file", "arguments": {"path": "b.py"}}}]},
    {"role": "tool", "tool_call_id": ID_A, "content": "print(1)"},
    {"role": "tool", "tool_call_id": ID_B, "content": "print(2)"},
    {"role": "assistant", "content": "Both print numbers."},
    {"role": "user", "content": "Thanks"},
]


def template(name: str) -> ChatTemplate:
    return ChatTemplate((FIXTURES / name).read_text(encoding="utf-8"), "<s>", "</s>")


@pytest.mark.parametrize("name", ALL)
def test_an_agent_history_renders(name):
    text = template(name).render(HISTORY, tools=TOOLS)
    assert text.startswith("<s>") and text.endswith("Thanks[/INST]")
    assert text.count("[TOOL_RESULTS]") == 2 and "print(1)" in text and "print(2)" in text


def test_devstral_exactly():
    tools_json = ('[{"type": "function", "function": {"name": "read_file", "description": "Read a file", '
                  '"parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]')
    assert template(DEVSTRAL).render(HISTORY, tools=TOOLS) == (
        "<s>[SYSTEM_PROMPT]Be brief.[/SYSTEM_PROMPT][AVAILABLE_TOOLS]" + tools_json + "[/AVAILABLE_TOOLS]"
        "[INST]Read a.py and b.py[/INST]"
        '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}[TOOL_CALLS]read_file[ARGS]{"path": "b.py"}</s>'
        "[TOOL_RESULTS]print(1)[/TOOL_RESULTS][TOOL_RESULTS]print(2)[/TOOL_RESULTS]"
        "Both print numbers.</s>[INST]Thanks[/INST]")


def test_small32_call_ids_are_mapped_the_same_in_calls_and_results():
    text = template(SMALL32).render(HISTORY, tools=TOOLS)
    a, b = short_call_id(ID_A), short_call_id(ID_B)
    assert re.findall(r"\[CALL_ID\]([^\[]*)\[ARGS\]", text) == [a, b]
    assert re.findall(r"\[TOOL_RESULTS\]([^\[]*)\[TOOL_CONTENT\]", text) == [a, b]
    assert '[TOOL_CALLS]read_file[CALL_ID]' + a + '[ARGS]{"path": "a.py"}' in text


def test_nemo_call_ids_are_mapped_the_same_in_calls_and_results():
    text = template(NEMO).render(HISTORY, tools=TOOLS)
    a, b = short_call_id(ID_A), short_call_id(ID_B)
    assert (f'[TOOL_CALLS][{{"name": "read_file", "arguments": {{"path": "a.py"}}, "id": "{a}"}}, '
            f'{{"name": "read_file", "arguments": {{"path": "b.py"}}, "id": "{b}"}}]</s>') in text
    assert f'"call_id": "{a}"}}[/TOOL_RESULTS]' in text and f'"call_id": "{b}"}}[/TOOL_RESULTS]' in text


def test_without_the_mapping_these_templates_refuse_agent_ids():
    for name in (SMALL32, NEMO):
        t = template(name)
        t.mistral_traits = (False, False)
        with pytest.raises(ChatTemplateError, match="length 9"):
            t.render(HISTORY, tools=TOOLS)


@pytest.mark.parametrize("name", ALL)
def test_each_turn_renders_the_earlier_ones_unchanged(name):
    """The conversation cache reuses the previous prompt: its text must be the start of the next one (no
    tools here, as Nemo and Small 3.2 write them before the last user message)."""
    t = template(name)
    turns = [HISTORY[:2], HISTORY[:5], HISTORY[:7]]
    texts = [t.render(m) for m in turns]
    for earlier, later in zip(texts, texts[1:], strict=False):
        common = earlier[: earlier.rindex("[INST]")] if name == NEMO else earlier   # Nemo: system in last user
        assert later.startswith(common)
    again = template(name).render(turns[-1])
    assert again == texts[-1]          # a fresh template (a restarted server) maps the ids the same


def test_results_and_calls_without_ids_pair_by_position():
    msgs = [HISTORY[1],
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "read_file", "arguments": {"path": p}}} for p in "ab"]},
            {"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}]
    text = template(SMALL32).render(msgs, tools=TOOLS)
    calls = re.findall(r"\[CALL_ID\]([^\[]*)\[ARGS\]", text)
    assert len(set(calls)) == 2 and all(re.fullmatch(r"[A-Za-z0-9]{9}", c) for c in calls)
    assert re.findall(r"\[TOOL_RESULTS\]([^\[]*)\[TOOL_CONTENT\]", text) == calls


def test_ministral3_writes_the_reasoning_back():
    text = template(MINISTRAL3).render(HISTORY, tools=TOOLS)
    assert ('[INST]Read a.py and b.py[/INST][THINK]Two reads.[/THINK]'
            '[TOOL_CALLS]read_file[ARGS]{"path": "a.py"}[TOOL_CALLS]read_file[ARGS]{"path": "b.py"}</s>') in text
    answered = [HISTORY[1], {"role": "assistant", "content": "Hi.", "reasoning_content": "Greet."}, HISTORY[6]]
    assert "[/INST][THINK]Greet.[/THINK]Hi.</s>[INST]Thanks" in template(MINISTRAL3).render(answered)


def test_traits_read_from_the_sources():
    assert [template(n).mistral_traits for n in ALL] == [(False, False), (True, False), (False, True), (True, False)]
    assert (FIXTURES / "gpt_oss_template.jinja").exists()
    assert ChatTemplate((FIXTURES / "gpt_oss_template.jinja").read_text()).mistral_traits == (False, False)


@pytest.mark.parametrize("given", ["call_abc", "toolu_01XYZ", "", "x" * 200, "ünï", "abc123XYZ"])
def test_short_call_id(given):
    short = short_call_id(given)
    assert re.fullmatch(r"[A-Za-z0-9]{9}", short) and short_call_id(given) == short
    assert (short == given) == bool(re.fullmatch(r"[A-Za-z0-9]{9}", given))


def test_short_call_ids_differ():
    ids = {short_call_id(f"call_{i}") for i in range(10000)}
    assert len(ids) == 10000


def test_tekken_prompt_has_the_markup_as_single_tokens():
    pytest.importorskip("mistral_common")
    from strata.engine.tokenizer import Tokenizer

    from tests.fixtures.tekken_vocab import tekken_metadata

    tok = Tokenizer.from_metadata(tekken_metadata())
    ids = tok.encode(template(SMALL32).render(HISTORY, tools=TOOLS), special=True)
    for marker, n in (("[TOOL_CALLS]", 2), ("[CALL_ID]", 2), ("[ARGS]", 2), ("[TOOL_RESULTS]", 2), ("</s>", 2),
                      ("[INST]", 2), ("[AVAILABLE_TOOLS]", 1), ("<s>", 1)):
        assert ids.count(tok.token_id(marker)) == n, marker


@pytest.mark.parametrize("name", ALL)
def test_a_user_turn_after_tool_results_renders_in_the_strict_shape(name):
    """Anthropic's tool_result blocks with text beside them arrive as tool messages then a user message,
    which Small 3.2's, Nemo's and Ministral 3's templates refuse; the shape render_chat falls back to
    (server/prompting.py alternating) joins that text to the last result."""
    from strata.server.prompting import alternating

    msgs = HISTORY[:5] + [{"role": "user", "content": "<system-reminder>be careful</system-reminder>"},
                          {"role": "system", "content": "Sandbox on."}]
    t = template(name)
    if name != DEVSTRAL:
        with pytest.raises(ChatTemplateError):
            t.render(msgs, tools=TOOLS)
    text = t.render(alternating(msgs), tools=TOOLS)
    assert "print(2)\n\n<system-reminder>be careful</system-reminder>\n\nSandbox on." in text


def test_devstral_renders_what_mistral_common_encodes():
    """Devstral's template and mistral-common's v13 instruct encoder (Devstral's and Magistral's) give the
    same tokens for an agent history: tools, a turn of two calls, their results, text, a user turn after
    tool results."""
    pytest.importorskip("mistral_common")
    from mistral_common.protocol.instruct.messages import (
        AssistantMessage,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from strata.engine.tokenizer import Tokenizer

    from tests.fixtures.tekken_vocab import tekken_file, tekken_metadata

    fn = TOOLS[0]["function"]
    calls = [ToolCall(id=i, function=FunctionCall(name="read_file", arguments=f'{{"path": "{p}"}}'))
             for i, p in (("aaaaaaaa1", "a.py"), ("aaaaaaaa2", "b.py"))]
    request = ChatCompletionRequest(
        tools=[Tool(function=Function(name=fn["name"], description=fn["description"], parameters=fn["parameters"]))],
        messages=[SystemMessage(content="Be brief."), UserMessage(content="Read a.py and b.py"),
                  AssistantMessage(content=None, tool_calls=calls),
                  ToolMessage(content="print(1)", tool_call_id="aaaaaaaa1"),
                  ToolMessage(content="print(2)", tool_call_id="aaaaaaaa2"),
                  AssistantMessage(content="Both print numbers."), UserMessage(content="Thanks"),
                  AssistantMessage(content=None, tool_calls=[calls[0]]),
                  ToolMessage(content="print(1)", tool_call_id="aaaaaaaa1"), UserMessage(content="And c.py?")])
    want = MistralTokenizer.from_file(str(tekken_file())).encode_chat_completion(request).tokens
    msgs = HISTORY + [HISTORY[2] | {"tool_calls": HISTORY[2]["tool_calls"][:1]}, HISTORY[3],
                      {"role": "user", "content": "And c.py?"}]
    tok = Tokenizer.from_metadata(tekken_metadata())
    assert tok.encode(template(DEVSTRAL).render(msgs, tools=TOOLS), special=True) == want


def test_ministral3_renders_what_mistral_common_encodes():
    """Ministral 3's template with reasoning sent back (`reasoning_content`, written as thinking blocks) and
    mistral-common's v13 encoder with ThinkChunks give the same tokens."""
    pytest.importorskip("mistral_common")
    from mistral_common.protocol.instruct.chunk import TextChunk, ThinkChunk
    from mistral_common.protocol.instruct.messages import (
        AssistantMessage,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from strata.engine.tokenizer import Tokenizer

    from tests.fixtures.tekken_vocab import tekken_file, tekken_metadata

    fn = TOOLS[0]["function"]
    request = ChatCompletionRequest(
        tools=[Tool(function=Function(name=fn["name"], description=fn["description"], parameters=fn["parameters"]))],
        messages=[SystemMessage(content="Be brief."), UserMessage(content="Read a.py"),
                  AssistantMessage(content=[ThinkChunk(thinking="One read."), TextChunk(text="Reading.")],
                                   tool_calls=[ToolCall(id="aaaaaaaa1", function=FunctionCall(
                                       name="read_file", arguments='{"path": "a.py"}'))]),
                  ToolMessage(content="print(1)", tool_call_id="aaaaaaaa1"),
                  AssistantMessage(content=[ThinkChunk(thinking="Done."), TextChunk(text="It prints 1.")]),
                  UserMessage(content="Thanks")])
    want = MistralTokenizer.from_file(str(tekken_file())).encode_chat_completion(request).tokens
    msgs = [HISTORY[0], {"role": "user", "content": "Read a.py"},
            {"role": "assistant", "content": "Reading.", "reasoning_content": "One read.",
             "tool_calls": [{"id": ID_A, "type": "function",
                             "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}]},
            {"role": "tool", "tool_call_id": ID_A, "content": "print(1)"},
            {"role": "assistant", "content": "It prints 1.", "reasoning_content": "Done."},
            {"role": "user", "content": "Thanks"}]
    tok = Tokenizer.from_metadata(tekken_metadata())
    assert tok.encode(template(MINISTRAL3).render(msgs, tools=TOOLS), special=True) == want


def test_small32_renders_what_mistral_common_encodes():
    """Small 3.2's template (agents' ids mapped) and mistral-common's v11 encoder (calls with ids, tools
    before the last user message) give the same tokens."""
    pytest.importorskip("mistral_common")
    from mistral_common.protocol.instruct.messages import (
        AssistantMessage,
        SystemMessage,
        ToolMessage,
        UserMessage,
    )
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Function, FunctionCall, Tool, ToolCall
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from strata.engine.tokenizer import Tokenizer

    from tests.fixtures.tekken_vocab import tekken_file, tekken_metadata

    fn = TOOLS[0]["function"]
    a, b = short_call_id(ID_A), short_call_id(ID_B)
    request = ChatCompletionRequest(
        tools=[Tool(function=Function(name=fn["name"], description=fn["description"], parameters=fn["parameters"]))],
        messages=[SystemMessage(content="Be brief."), UserMessage(content="Read a.py and b.py"),
                  AssistantMessage(content=None, tool_calls=[
                      ToolCall(id=i, function=FunctionCall(name="read_file", arguments=f'{{"path": "{p}"}}'))
                      for i, p in ((a, "a.py"), (b, "b.py"))]),
                  ToolMessage(content="print(1)", tool_call_id=a), ToolMessage(content="print(2)", tool_call_id=b),
                  AssistantMessage(content="Both print numbers."), UserMessage(content="Thanks")])
    want = MistralTokenizer.from_file(str(tekken_file("v11"))).encode_chat_completion(request).tokens
    tok = Tokenizer.from_metadata(tekken_metadata())
    assert tok.encode(template(SMALL32).render(HISTORY, tools=TOOLS), special=True) == want
