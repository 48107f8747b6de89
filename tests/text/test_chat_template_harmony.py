"""gpt-oss's real chat template (tests/fixtures/gpt_oss_template.jinja) rendered by our sandbox: tools as the
TypeScript namespace, an agent's history (a call with its reasoning, the tool's result, an answer with its
reasoning), reasoning_effort, and the Harmony preparation of messages (chat_template.harmony_messages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from strata.engine.chat_template import ChatTemplate, ChatTemplateError, harmony_messages

TEMPLATE = (Path(__file__).resolve().parents[1] / "fixtures" / "gpt_oss_template.jinja").read_text(encoding="utf-8")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}}}}}
READ = {"type": "function", "function": {"name": "read_file",   # no description: optional in every API
                                         "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


def _call(name: str, args: dict, cid: str = "c1") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


@pytest.fixture(scope="module")
def tmpl() -> ChatTemplate:
    t = ChatTemplate(TEMPLATE, "<|startoftext|>", "<|return|>")
    assert t.harmony and t.supports_tools
    return t


def test_history_with_tools_renders_harmony(tmpl):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the weather tool.",
         "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21C"},
        {"role": "assistant", "content": "Sunny, 21C.", "reasoning_content": "The tool said sunny."},
        {"role": "user", "content": "And tomorrow?"},
    ]
    text = tmpl.render(messages, tools=[WEATHER, READ])
    assert text.startswith("<|start|>system<|message|>You are ChatGPT")
    assert "Reasoning: medium\n\n" in text
    assert "Calls to these tools must go to the commentary channel: 'functions'." in text
    assert "<|start|>developer<|message|># Instructions\n\nBe brief.\n\n# Tools\n\n## functions\n\n" in text
    assert "namespace functions {\n\n// Weather of a city\ntype get_weather = (_: {\n// the city\ncity: string,\n" in text
    assert 'unit?: "c" | "f",\ndays?: number,\ntags?: string[],\n}) => any;' in text
    assert "// \ntype read_file = (_: {\npath?: string,\n}) => any;" in text     # no description: empty
    assert "} // namespace functions<|end|>" in text
    assert "<|start|>user<|message|>Weather in Paris?<|end|>" in text
    # the call: recipient in the role header, as the template writes it
    assert ('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}'
            "<|call|>") in text
    assert '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny, 21C"<|end|>' in text
    assert "<|start|>assistant<|channel|>final<|message|>Sunny, 21C.<|end|>" in text
    # reasoning of finished turns is dropped (a final answer came after it)
    assert "Need the weather tool." not in text and "The tool said sunny." not in text
    assert text.endswith("<|start|>user<|message|>And tomorrow?<|end|><|start|>assistant")


def test_reasoning_of_a_call_in_progress_is_kept(tmpl):
    # the agent loop: the last assistant turn called a tool and its result is back; no final answer yet
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the weather tool.",
         "tool_calls": [_call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = tmpl.render(messages, tools=[WEATHER])
    assert ("<|start|>assistant<|channel|>analysis<|message|>Need the weather tool.<|end|>"
            "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>") in text
    assert "<|start|>developer<|message|># Tools" in text       # tools without a system prompt


def test_reasoning_and_preamble_with_a_call(tmpl):
    # llama.cpp drops the content of a call turn that has reasoning (the template refuses both)
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": "Let me check.", "reasoning_content": "Think.",
                 "tool_calls": [_call("get_weather", {"city": "Oslo"})]},
                {"role": "tool", "content": "rain"}]
    text = tmpl.render(messages, tools=[WEATHER])
    assert "<|channel|>analysis<|message|>Think.<|end|>" in text and "Let me check." not in text
    # without reasoning, the preamble is the analysis the template writes
    messages[1] = {"role": "assistant", "content": "Let me check.",
                   "tool_calls": [_call("get_weather", {"city": "Oslo"})]}
    assert "<|channel|>analysis<|message|>Let me check.<|end|>" in tmpl.render(messages, tools=[WEATHER])


def test_several_calls_in_one_turn_are_all_written(tmpl):
    messages = [{"role": "user", "content": "two cities"},
                {"role": "assistant", "content": None, "tool_calls": [
                    _call("get_weather", {"city": "Oslo"}, "a"), _call("read_file", {"path": "x"}, "b")]},
                {"role": "tool", "tool_call_id": "a", "content": "rain"},
                {"role": "tool", "tool_call_id": "b", "content": "data"}]
    text = tmpl.render(messages, tools=[WEATHER, READ])
    assert 'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>' in text
    assert 'to=functions.read_file<|channel|>commentary json<|message|>{"path": "x"}<|call|>' in text


@pytest.mark.parametrize("order", ["in order", "reversed", "no ids"])
def test_each_result_of_several_calls_is_labelled_with_its_own_call(tmpl, order):
    """The template names a tool result after the last call it wrote: each call goes right before its
    result (matched by tool_call_id, else by position), or "rain" would read as read_file's."""
    results = [{"role": "tool", "tool_call_id": "a", "content": "rain"},
               {"role": "tool", "tool_call_id": "b", "content": "data"}]
    if order == "reversed":
        results.reverse()
    if order == "no ids":
        results = [{k: v for k, v in r.items() if k != "tool_call_id"} for r in results]
    messages = [{"role": "user", "content": "two cities"},
                {"role": "assistant", "content": None, "reasoning_content": "both", "tool_calls": [
                    _call("get_weather", {"city": "Oslo"}, "a"), _call("read_file", {"path": "x"}, "b")]},
                *results, {"role": "user", "content": "thanks"}]
    text = tmpl.render(messages, tools=[WEATHER, READ])
    weather = ('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}'
               '<|call|><|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"rain"<|end|>')
    read = ('<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>{"path": "x"}<|call|>'
            '<|start|>functions.read_file to=assistant<|channel|>commentary<|message|>"data"<|end|>')
    assert "<|channel|>analysis<|message|>both<|end|>" + weather + read in text


@pytest.mark.parametrize("effort", ["low", "high"])
def test_reasoning_effort_is_a_template_variable(tmpl, effort):
    text = tmpl.render([{"role": "user", "content": "hi"}], reasoning_effort=effort)
    assert f"Reasoning: {effort}\n\n" in text


def test_empty_tool_calls_and_no_tools(tmpl):
    text = tmpl.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello", "tool_calls": []},
                        {"role": "user", "content": "bye"}])
    assert "<|start|>assistant<|channel|>final<|message|>Hello<|end|>" in text
    assert "# Tools" not in text and "developer" not in text


def test_channel_markup_in_content_is_refused_by_the_template(tmpl):
    with pytest.raises(ChatTemplateError, match="<|channel|> tags in the content"):
        tmpl.render([{"role": "user", "content": "hi"},
                     {"role": "assistant", "content": "<|channel|>final<|message|>x"},
                     {"role": "user", "content": "again"}])


def test_harmony_messages_shape():
    msgs = harmony_messages([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "pre", "reasoning_content": "r",
         "tool_calls": [_call("a", {}, "1"), _call("b", {}, "2")]},
        {"role": "assistant", "content": "answer", "reasoning_content": "r2"},
    ])
    assert msgs[1] == {"role": "assistant", "content": "", "thinking": "r", "tool_calls": [_call("a", {}, "1")]}
    assert msgs[2] == {"role": "assistant", "content": "", "tool_calls": [_call("b", {}, "2")]}
    assert msgs[3] == {"role": "assistant", "content": "answer", "thinking": "r2"}


def test_undefined_plus_string_is_the_string_in_any_template():
    t = ChatTemplate("{{ 'a' + d.missing + 'b' + none_value }}|{{ y + 'c' + x }}")
    assert t.render([], d={}, none_value=None, y=None) == "ab|c"
    # other undefined uses still fail with a clear error
    with pytest.raises(ChatTemplateError, match="UndefinedError"):
        ChatTemplate("{{ x.missing.deeper }}").render([])
    assert ChatTemplate("{{ 1 + 2 }}").render([]) == "3"
