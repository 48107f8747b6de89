"""tool_choice none on Llama 3's call format, through the real SDKs on scripted tiny models (tests/fixtures/tiny_gguf.py
`script`) whose vocabulary has Llama 3.1's `<|python_tag|>` and whose template writes tools and calls as Llama
3.1 / 3.2 / 3.3's do: a call is a bare JSON object, `{"name": ..., "parameters": ...}`, as the whole answer, or
one after `<|python_tag|>`. Under `auto` each scripted answer is read as a call; under `none` the prompt is the
same, the tag is banned and the bare call's start refused (server/no_call_rule.py, engine bare_call_scan.py), so
the answer carries no call; a JSON answer that is no call (`{"name": "Alice", ...}`) comes back whole."""

from __future__ import annotations

import contextlib

import pytest
from strata.engine.chat_template import parse_tool_calls

from tests.server.live import LiveServer, sdk_clients

# Llama 3's format (written for these tests, not Meta's file): header tokens, the tools as JSON in the first
# user message, a call written back as {"name": ..., "parameters": ...}, its result an `ipython` message
LLAMA3_SHAPED = (
    "{{ bos_token }}{% set ns = namespace(first=true) %}"
    "<|start_header_id|>system<|end_header_id|>\n\n{% if tools %}Environment: ipython\n{% endif %}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}<|eot_id|>"
    "{% for m in messages %}{% if m['role'] == 'user' %}<|start_header_id|>user<|end_header_id|>\n\n"
    "{% if tools and ns.first %}Respond with a JSON call {\"name\": function name, \"parameters\": arguments}."
    "\n\n{% for t in tools %}{{ t | tojson }}\n\n{% endfor %}{% set ns.first = false %}{% endif %}"
    "{{ m['content'] }}<|eot_id|>"
    "{% elif m['role'] == 'assistant' %}<|start_header_id|>assistant<|end_header_id|>\n\n"
    "{% if m.get('tool_calls') %}{% set c = m['tool_calls'][0]['function'] %}"
    "{\"name\": \"{{ c['name'] }}\", \"parameters\": {{ c['arguments'] if c['arguments'] is string "
    "else c['arguments'] | tojson }}}{% else %}{{ m['content'] }}{% endif %}<|eot_id|>"
    "{% elif m['role'] in ('tool', 'ipython') %}<|start_header_id|>ipython<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
MARKUP = ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>")

BARE = ('{"name": "get_weather", ', '"parameters": {"city": "Paris"}}')     # refused at its second token
TAGGED = ("<|python_tag|>", '{"name": "get_weather", "parameters": {"city": "Rome"}}')
NOT_A_CALL = ('{"name": "Alice", ', '"age": 3}')                          # JSON that is no call

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": SCHEMA}}]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Weather of a city", "input_schema": SCHEMA}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@contextlib.contextmanager
def llama_server(factory, pieces: tuple[str, ...]):
    """A live server on a tiny model that answers `pieces` (each one added token), then its end token."""
    from strata.engine import Engine

    shape = dict(ctx_len=2048, n_vocab=512, seed=7, tokenizer_pre="llama-bpe",
                 added_tokens=tuple(dict.fromkeys(MARKUP + pieces)), chat_template=LLAMA3_SHAPED)
    probe = Engine(str(factory(**shape)), n_ctx=64, n_threads=1)
    prompt = probe.tokenize(probe.apply_chat_template(ASK, tools=TOOLS, add_generation_prompt=True), special=True)
    ids = [probe.tokenize(p, special=True) for p in pieces]
    assert all(len(i) == 1 for i in ids), "each piece must be one token"
    model = factory(**shape, script=(prompt[-1], *(i[0] for i in ids), probe.tokenizer.eos_id))
    with LiveServer(model=str(model), ctx=2048, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield s


def chat(oai, choice: str):
    return oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0,
                                       max_tokens=12)


def no_call_in(text: str) -> None:
    """The answer as the call readers would read it under `auto`: no call, no tag."""
    assert "<|python_tag|>" not in text and parse_tool_calls(text)[1] == [], text


@pytest.mark.parametrize("pieces", [BARE, TAGGED], ids=["bare_json", "python_tag"])
def test_none_keeps_a_llama_call_off(tiny_model_factory, pieces):
    with llama_server(tiny_model_factory, pieces) as s:
        oai, claude = sdk_clients(s)
        auto = chat(oai, "auto")
        none = chat(oai, "none")
        m = claude.messages.create(model="m", max_tokens=12, messages=ASK, tools=CLAUDE_TOOLS,
                                   tool_choice={"type": "none"}, extra_body={"temperature": 0})
    assert auto.choices[0].finish_reason == "tool_calls"                 # the model calls under auto
    assert auto.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens         # the tools written all the same
    message = none.choices[0].message
    assert not message.tool_calls and none.choices[0].finish_reason in ("stop", "length"), message
    no_call_in(message.content or "")
    if pieces == BARE:                                                  # written up to the refused token
        assert (message.content or "").startswith(BARE[0].strip()), message.content
    assert m.stop_reason in ("end_turn", "max_tokens") and [b.type for b in m.content] == ["text"], m.content
    no_call_in(m.content[0].text)


def test_none_leaves_a_json_answer_that_is_no_call_whole(tiny_model_factory):
    with llama_server(tiny_model_factory, NOT_A_CALL) as s:
        oai, _ = sdk_clients(s)
        none = chat(oai, "none")
    assert none.choices[0].finish_reason == "stop"
    assert none.choices[0].message.content == "".join(NOT_A_CALL)


def test_none_streams_what_it_answers_and_a_json_format_is_not_refused(tiny_model_factory):
    """The refused token is never sent: the streamed text (both SDKs) is the answer's, nothing sent that later
    goes; with a JSON format asked for the answer is held to that format instead, so a call-shaped JSON answer
    comes back whole, as text (docs/api.md, "No calls")."""
    with llama_server(tiny_model_factory, BARE) as s:
        oai, claude = sdk_clients(s)
        whole = chat(oai, "none").choices[0].message.content
        chunks = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="none", temperature=0,
                                             max_tokens=12, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        with claude.messages.stream(model="m", max_tokens=12, messages=ASK, tools=CLAUDE_TOOLS,
                                    tool_choice={"type": "none"}, extra_body={"temperature": 0}) as st:
            claude_streamed = "".join(st.text_stream)
            final = st.get_final_message()
        json_answer = oai.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="none",
                                                  temperature=0, max_tokens=30,
                                                  response_format={"type": "json_object"})
    assert streamed == whole == claude_streamed == final.content[0].text, (streamed, whole, claude_streamed)
    no_call_in(streamed)
    message = json_answer.choices[0].message
    assert message.content == "".join(BARE) and not message.tool_calls, message
