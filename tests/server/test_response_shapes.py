"""The answer objects of both APIs built from a finished generation: tool-call blocks in the model's text
become OpenAI `tool_calls` / Anthropic `tool_use` blocks (only when tools were offered), stop reasons,
usage meanings (OpenAI counts cached tokens inside prompt_tokens, Anthropic outside input_tokens), and
llama.cpp's `timings`. The texts are what models write; parsing is the text teammate's parse_tool_calls."""

from __future__ import annotations

import json

import anthropic.types
import openai.types.chat
import pytest
from strata.server.anthropic_api import message_response
from strata.server.jobs import Completion
from strata.server.openai_api import chat_response

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
CALL_TEXT = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def done(text: str, finish: str = "stop", stop: str | None = None, n_out: int = 7) -> Completion:
    return Completion(text=text, tokens=list(range(n_out)), finish_reason=finish, stop_sequence=stop,
                      prompt_tokens=100, cached_tokens=80, prompt_ms=20.0, predicted_ms=70.0)


def test_openai_tool_calls_from_the_models_text():
    body = chat_response(done(CALL_TEXT), "gpt-x", tools=TOOLS)
    parsed = openai.types.chat.ChatCompletion.model_validate(body)     # the SDK's own model accepts it
    choice = parsed.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me check."
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"} and call.id.startswith("call_")


def test_no_tools_offered_means_plain_text():
    body = chat_response(done(CALL_TEXT), "gpt-x", tools=None)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": CALL_TEXT}
    assert body["choices"][0]["finish_reason"] == "stop"


def test_openai_usage_and_timings():
    body = chat_response(done("hi", finish="length"), "m", tools=None)
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107,
                             "prompt_tokens_details": {"cached_tokens": 80},
                             "completion_tokens_details": {"reasoning_tokens": 0}}
    t = body["timings"]
    assert (t["cache_n"], t["prompt_n"], t["predicted_n"]) == (80, 20, 7)
    # 6 tokens in the 70 ms after the first (which came with the prompt's read)
    assert t["prompt_per_second"] == 1000.0 and t["predicted_per_second"] == 85.71


def test_anthropic_tool_use_blocks_from_the_models_text():
    body = message_response(done(CALL_TEXT), "claude-x", "msg_1", tools=TOOLS)
    msg = anthropic.types.Message.model_validate(body)
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    assert msg.content[1].name == "get_weather" and msg.content[1].input == {"city": "Oslo"}
    assert msg.usage.input_tokens == 20 and msg.usage.cache_read_input_tokens == 80 and msg.usage.output_tokens == 7


def test_anthropic_stop_reasons():
    assert message_response(done("a", stop="END"), "m", "id", None)["stop_reason"] == "stop_sequence"
    assert message_response(done("a", finish="length"), "m", "id", None)["stop_reason"] == "max_tokens"
    assert message_response(done("a"), "m", "id", None)["stop_reason"] == "end_turn"
    only_call = message_response(done('<tool_call>{"name": "f", "arguments": {}}</tool_call>'), "m", "id", TOOLS)
    assert [b["type"] for b in only_call["content"]] == ["tool_use"]


def test_xml_call_values_follow_the_tools_schema_types():
    """Qwen3-Coder's XML values: a string-typed parameter keeps what was written (a file's JSON text, a
    number-like name), other types read as JSON; without a schema only non-string JSON is read."""
    text = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n<parameter=extra>\n{\"a\": 1}\n</parameter>\n</function>\n</tool_call>")
    call = chat_response(done(text), "m", tools=TOOLS)["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"city": "1984", "days": 3, "extra": {"a": 1}}
    nullable = [{"type": "function", "function": {"name": "get_weather", "parameters": {"properties": {
        "city": {"type": ["string", "null"]}, "days": {"type": "string"}}}}}]
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nnull\n</parameter>\n<parameter=days>\nnull\n</parameter>\n</function>\n</tool_call>"
    call = chat_response(done(text), "m", tools=nullable)["choices"][0]["message"]["tool_calls"][0]["function"]
    assert json.loads(call["arguments"]) == {"city": None, "days": "null"}


def gate_run(pieces: list[str]):
    from strata.server.prompting import ToolTextGate

    gate = ToolTextGate(TOOLS)
    streamed = "".join(gate.feed(p) for p in pieces)
    rest, calls = gate.finish("".join(pieces))
    return streamed, rest, calls


def test_tool_gate_streams_text_before_a_call_block_and_holds_the_block():
    streamed, rest, calls = gate_run(["Let me ", "check.\n<tool", '_call>\n{"name": "f", "arguments": {}}\n</tool_call>'])
    # the newline before the block is not content (the whole answer's content is stripped): held, then dropped
    assert streamed == "Let me check." and rest == "" and calls == [{"name": "f", "arguments": "{}"}]
    streamed, rest, calls = gate_run(["Let me ", "check.\n", "\nDone. "])
    assert streamed + rest == "Let me check.\n\nDone. " and streamed == "Let me check.\n\nDone." and calls == []


def test_tool_gate_holds_an_answer_that_starts_like_a_bare_call():
    streamed, rest, calls = gate_run(["  {\"name\"", ': "f", "arguments": {"a": 1}}'])
    assert streamed == "" and calls == [{"name": "f", "arguments": '{"a": 1}'}]
    streamed, rest, calls = gate_run(["[", "1, 2]"])      # held, then not a call: sent whole at the end
    assert streamed == "" and rest == "[1, 2]" and calls == []


def test_tool_gate_passes_plain_text_through():
    assert gate_run(["Hello", " world"]) == ("Hello world", "", [])
    assert gate_run(["<", "b>bold</b>"]) == ("<b>bold</b>", "", [])


def test_tool_gate_streams_a_code_fence_of_another_language():
    """An answer that opens a ```python fence cannot be a bare JSON call: it streams (it was held to its end,
    so with tools offered, as agents always offer them, a code answer did not stream at all)."""
    streamed, rest, calls = gate_run(["``", "`py", "thon\nprint(1)\n", "```\nDone."])
    assert streamed.startswith("```python\nprint(1)") and streamed + rest == "```python\nprint(1)\n```\nDone."
    assert calls == []
    streamed, rest, calls = gate_run(["```\n", "def f", "(): pass\n```"])   # no language, not JSON inside
    assert streamed.startswith("```\ndef f") and calls == []
    streamed, rest, calls = gate_run(["```js", "on\n", '{"name": "f", "arguments": {"a": 1}}', "\n```"])
    assert streamed == "" and calls == [{"name": "f", "arguments": '{"a": 1}'}]
    streamed, rest, calls = gate_run(["```", '{"name": "f", "arguments": {}}```'])
    assert streamed == "" and calls == [{"name": "f", "arguments": "{}"}]
    streamed, rest, calls = gate_run(["[TOOL_", 'CALLS] [{"name": "f", "arguments": {}}]'])
    assert streamed == "" and calls == [{"name": "f", "arguments": "{}"}]
    assert gate_run(["`code` ", "spans stream"]) == ("`code` spans stream", "", [])


STRICT_TEMPLATE = (   # as Mistral's: one leading system prompt, then strictly user / assistant turns
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set msgs = messages[1:] %}"
    "{% else %}{% set sys = '' %}{% set msgs = messages %}{% endif %}"
    "{% for message in msgs %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + (sys + '\\n\\n' if loop.first and sys else '') + "
    "message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + '<|im_end|>' }}{% endif %}{% endfor %}"
)


def test_a_strict_template_gets_agents_messages_in_its_shape(tiny_model_factory):
    """Agents send two system prompts (instructions, then developer notes) and consecutive user messages;
    a template that insists on alternating turns renders them joined instead of refusing the request,
    and messages it takes as they are render unchanged."""
    import openai
    from strata.server.prompting import alternating

    from tests.server.live import LiveServer

    model = tiny_model_factory(ctx_len=2048, n_vocab=512, seed=3, chat_template=STRICT_TEMPLATE)
    agent = [{"role": "system", "content": "You are Codex."}, {"role": "system", "content": "Sandbox: on."},
             {"role": "user", "content": "<environment>"}, {"role": "user", "content": "fix the build"}]
    joined = [{"role": "system", "content": "You are Codex.\n\nSandbox: on."},
              {"role": "user", "content": "<environment>\n\nfix the build"}]
    assert alternating(agent) == joined
    assert alternating(joined) == joined
    mid = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "system", "content": "c"}]
    assert alternating(mid)[2] == {"role": "user", "content": "c"}
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        oai = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        as_sent = oai.chat.completions.create(model="m", messages=agent, max_tokens=1)
        as_joined = oai.chat.completions.create(model="m", messages=joined, max_tokens=1)
        assert as_sent.usage.prompt_tokens == as_joined.usage.prompt_tokens
        with pytest.raises(openai.BadRequestError, match="roles must alternate"):
            oai.chat.completions.create(model="m", messages=[{"role": "assistant", "content": "x"},
                                                             {"role": "assistant", "content": "y"}], max_tokens=1)
