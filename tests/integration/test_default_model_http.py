"""The real default model (SmolLM2-135M-Instruct Q4_1) behind a live server, driven by the `openai` and
`anthropic` SDKs: streaming equals non-streaming, a second turn reads only its new tokens, greedy tokens
are the same solo and batched, stop sequences, tools accepted. Few tokens each: the CPU is shared."""

from __future__ import annotations

import threading

import anthropic
import openai
import pytest

from tests.server.live import LiveServer

GREEDY = {"temperature": 0}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def server(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=1024, batch=2, threads=2, conversation_cache_mib=0) as s:
        yield s


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=300)


def test_chat_stream_equals_non_stream_and_reuses_the_prompt(oai):
    whole = oai.chat.completions.create(model="gpt-4o", messages=QUESTION, max_tokens=8, **GREEDY)
    text = whole.choices[0].message.content
    assert text and whole.usage.completion_tokens <= 8
    chunks = list(oai.chat.completions.create(model="gpt-4o", messages=QUESTION, max_tokens=8, stream=True,
                                              stream_options={"include_usage": True}, **GREEDY))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == whole.usage.prompt_tokens - 1


def test_second_turn_reads_only_new_tokens(oai, claude):
    r1 = oai.chat.completions.create(model="m", messages=QUESTION, max_tokens=6, **GREEDY)
    turn2 = QUESTION + [{"role": "assistant", "content": r1.choices[0].message.content},
                        {"role": "user", "content": "And of Italy?"}]
    r2 = oai.chat.completions.create(model="m", messages=turn2, max_tokens=4, **GREEDY)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r1.usage.prompt_tokens
    assert r2.model_extra["timings"]["prompt_n"] == r2.usage.prompt_tokens - cached
    m = claude.messages.create(model="claude", max_tokens=4, messages=turn2, extra_body=GREEDY)
    assert m.usage.cache_read_input_tokens >= r1.usage.prompt_tokens
    assert m.usage.input_tokens == r2.usage.prompt_tokens - m.usage.cache_read_input_tokens


def test_greedy_is_the_same_solo_and_batched(oai):
    prompt = [{"role": "user", "content": "Name a colour."}]
    solo = oai.chat.completions.create(model="m", messages=prompt, max_tokens=6, **GREEDY).choices[0].message.content
    out: list[str] = []

    def ask(messages):
        out.append(oai.chat.completions.create(model="m", messages=messages, max_tokens=6,
                                               **GREEDY).choices[0].message.content)

    other = [{"role": "user", "content": "Say something else entirely, please."}]
    threads = [threading.Thread(target=ask, args=(m,)) for m in (prompt, other, prompt)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out.count(solo) >= 2


def test_anthropic_stream_and_stop_sequence(claude):
    with claude.messages.stream(model="claude", max_tokens=8, messages=QUESTION, extra_body=GREEDY) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert final.content[0].text == text and final.usage.output_tokens <= 8
    if len(text) > 4:
        stop = text[2:4]
        r = claude.messages.create(model="claude", max_tokens=8, messages=QUESTION, stop_sequences=[stop],
                                   extra_body=GREEDY)
        assert r.stop_reason == "stop_sequence" and r.content[0].text == text[: text.index(stop)]


def test_tools_are_offered_to_the_model(oai):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                    tools=tools, max_tokens=4, **GREEDY)
    plain = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                        max_tokens=1, **GREEDY)
    assert r.usage.prompt_tokens > plain.usage.prompt_tokens + 30
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
