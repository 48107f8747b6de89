"""`tool_choice: none` (chat, Responses) and Anthropic's `{"type": "none"}` write the conversation's tools into
the prompt as `auto` does, so the turn reuses the whole history, and keep the answer off calls (the default
model, the real SDKs, a live server).

Coding agents send their side requests (a summary, a compaction, a title) with the conversation's own tools and
tool_choice none so that the prompt's start stays the conversation's. The tools used to be dropped: that turn's
prompt lacked the tool definitions every other turn writes and read the history again from where they stood
(session 39's new-user trial: 243 of 414 tokens reused where auto reused 574 of 575). Each test first finds a
seed at which the default model calls under `auto` (a history of three weather calls, then a fourth city), then
asks the same with `none` and that seed: the prompt is the same, all but its last token reused, and the answer
is text, without a call's markup."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.server.live import LiveServer

SYSTEM = "You are a weather assistant. Call get_weather for every city asked about."
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather of a city",
                                                "parameters": SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the weather of a city",
                    "parameters": SCHEMA}]
CLAUDE_TOOLS = [{"name": "get_weather", "description": "Get the weather of a city", "input_schema": SCHEMA}]
CITIES = ("Paris", "Rome", "Berlin")
ASK = "What is the weather in London?"
SEEDS = range(12)
# the opener the no-call check refuses; a closing tag alone is not a call, and the default model, refused its
# opener, may still write one after call-like text (`<tool_call1>` ... `</tool_call>`, read as text)
MARKUP = ("<tool_call>",)


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=2048, batch=2, threads=2, conversation_cache_mib=64) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)


def chat_history() -> list[dict]:
    out: list[dict] = [{"role": "system", "content": SYSTEM}]
    for n, city in enumerate(CITIES):
        out += [{"role": "user", "content": f"What is the weather in {city}?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{n}", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": city})}}]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": "Sunny, 20 C"},
                {"role": "assistant", "content": f"It is sunny in {city}, 20 C."}]
    return out + [{"role": "user", "content": ASK}]


def responses_history() -> list[dict]:
    out: list[dict] = []
    for n, city in enumerate(CITIES):
        out += [{"role": "user", "content": f"What is the weather in {city}?"},
                {"type": "function_call", "call_id": f"c{n}", "name": "get_weather",
                 "arguments": json.dumps({"city": city})},
                {"type": "function_call_output", "call_id": f"c{n}", "output": "Sunny, 20 C"},
                {"role": "assistant", "content": f"It is sunny in {city}, 20 C."}]
    return out + [{"role": "user", "content": ASK}]


def claude_history() -> list[dict]:
    out: list[dict] = []
    for n, city in enumerate(CITIES):
        out += [{"role": "user", "content": f"What is the weather in {city}?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"c{n}", "name": "get_weather",
                                                   "input": {"city": city}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{n}", "content": "Sunny, 20 C"}]},
                {"role": "assistant", "content": f"It is sunny in {city}, 20 C."}]
    return out + [{"role": "user", "content": ASK}]


def first_seed(ask, calls) -> tuple[int, object]:
    """The first seed whose answer under `auto` is a call, and that answer (the model calls here)."""
    for seed in SEEDS:
        answer = ask(seed)
        if calls(answer):
            return seed, answer
    raise AssertionError(f"the default model called under auto at none of the seeds {SEEDS}")


def no_markup(text: str | None) -> None:
    assert not any(m in (text or "") for m in MARKUP), text


def test_chat_none_reuses_the_history_and_answers_in_text(oai):
    def ask(choice: str, seed: int):
        return oai.chat.completions.create(model="m", messages=chat_history(), tools=CHAT_TOOLS, tool_choice=choice,
                                           max_tokens=40, temperature=0.8, seed=seed)

    seed, auto = first_seed(lambda s: ask("auto", s), lambda r: bool(r.choices[0].message.tool_calls))
    none = ask("none", seed)
    assert none.usage.prompt_tokens == auto.usage.prompt_tokens            # the tools written as auto writes them
    assert none.usage.prompt_tokens_details.cached_tokens >= none.usage.prompt_tokens - 1, none.usage
    message = none.choices[0].message
    assert not message.tool_calls and none.choices[0].finish_reason in ("stop", "length"), message
    no_markup(message.content)
    streamed = list(oai.chat.completions.create(model="m", messages=chat_history(), tools=CHAT_TOOLS,
                                                tool_choice="none", max_tokens=40, temperature=0.8, seed=seed,
                                                stream=True))
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in streamed)
    no_markup("".join(c.choices[0].delta.content or "" for c in streamed if c.choices))


def test_responses_none_reuses_the_history_and_answers_in_text(oai):
    def ask(choice: str, seed: int):
        return oai.responses.create(model="m", instructions=SYSTEM, input=responses_history(), tools=RESPONSES_TOOLS,
                                    tool_choice=choice, max_output_tokens=40, temperature=0.8,
                                    extra_body={"seed": seed})

    def calls(r) -> list:
        return [o for o in r.output if o.type == "function_call"]

    seed, auto = first_seed(lambda s: ask("auto", s), lambda r: bool(calls(r)))
    none = ask("none", seed)
    assert none.usage.input_tokens == auto.usage.input_tokens
    assert none.usage.input_tokens_details.cached_tokens >= none.usage.input_tokens - 1, none.usage
    assert not calls(none) and [o.type for o in none.output] == ["message"], none.output
    no_markup(none.output_text)


def test_messages_none_reuses_the_history_and_answers_in_text(server):
    claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)

    def ask(choice: dict, seed: int):
        return claude.messages.create(model="m", system=SYSTEM, messages=claude_history(), tools=CLAUDE_TOOLS,
                                      tool_choice=choice, max_tokens=40,
                                      extra_body={"seed": seed, "temperature": 0.8})

    seed, auto = first_seed(lambda s: ask({"type": "auto"}, s), lambda r: r.stop_reason == "tool_use")
    counted = claude.messages.count_tokens(model="m", system=SYSTEM, messages=claude_history(), tools=CLAUDE_TOOLS,
                                           tool_choice={"type": "none"}).input_tokens
    with claude.messages.stream(model="m", system=SYSTEM, messages=claude_history(), tools=CLAUDE_TOOLS,
                                tool_choice={"type": "none"}, max_tokens=40,
                                extra_body={"seed": seed, "temperature": 0.8}) as stream:
        none = stream.get_final_message()
    prompt = none.usage.input_tokens + none.usage.cache_read_input_tokens
    assert prompt == auto.usage.input_tokens + auto.usage.cache_read_input_tokens == counted
    assert none.usage.cache_read_input_tokens >= prompt - 1, none.usage
    assert none.stop_reason in ("end_turn", "max_tokens") and [b.type for b in none.content] == ["text"], none.content
    no_markup(none.content[0].text)
