"""`POST /v1/responses` with `include: ["message.output_text.logprobs"]` and `top_logprobs`, through the real
`openai` SDK: the tiny model's log-probabilities equal chat completions' for the same prompt, streamed and
not; a scripted model that thinks, writes text and calls a tool gives the text's tokens only; the default
model asked to copy text then a call block the same; bad values are a 400 naming the field."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import Response

from tests.server.live import LiveServer, scripted_model

LOGPROBS = ["message.output_text.logprobs"]
ASK = "Count to five."
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


def ask(client, input=ASK, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", 8)
    return client.responses.create(model="m", input=input, **kw)


def as_tuples(entries) -> list:
    return [(e.token, e.logprob, list(e.bytes), [(a.token, a.logprob) for a in e.top_logprobs or []])
            for e in entries]


def text_of(entries) -> str:
    return bytes(b for e in entries for b in e.bytes).decode("utf-8", "replace")


def test_logprobs_are_chat_completions_own(oai):
    r = ask(oai, include=LOGPROBS, top_logprobs=3)
    part = r.output[0].content[0]
    chat = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": ASK}], max_tokens=8,
                                       temperature=0, logprobs=True, top_logprobs=3)
    assert part.text == chat.choices[0].message.content
    assert len(part.logprobs) == r.usage.output_tokens == 8
    assert as_tuples(part.logprobs) == as_tuples(chat.choices[0].logprobs.content)
    assert text_of(part.logprobs) == part.text
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in part.logprobs)


def test_the_stream_carries_each_deltas_tokens(oai):
    plain = ask(oai, include=LOGPROBS, top_logprobs=2).output[0].content[0]
    events = list(ask(oai, include=LOGPROBS, top_logprobs=2, stream=True))
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    streamed = [lp for d in deltas for lp in d.logprobs]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in plain.logprobs]
    assert [[(a.token, a.logprob) for a in e.top_logprobs] for e in streamed] == \
        [[(a.token, a.logprob) for a in e.top_logprobs] for e in plain.logprobs]
    assert all(d.logprobs for d in deltas)          # one token or more a delta: every delta has its own
    done = next(e for e in events if e.type == "response.output_text.done")
    assert as_tuples(done.logprobs) == as_tuples(plain.logprobs)
    final = events[-1].response.output[0].content[0]
    assert as_tuples(final.logprobs) == as_tuples(plain.logprobs) and final.text == plain.text


def test_not_asked_there_are_none(oai):
    assert ask(oai).output[0].content[0].logprobs is None
    assert ask(oai, include=["reasoning.encrypted_content"]).output[0].content[0].logprobs is None
    events = list(ask(oai, stream=True))
    assert all(e.logprobs == [] for e in events if e.type == "response.output_text.delta")


def test_top_logprobs_alone_asks_for_them(oai):
    lps = ask(oai, top_logprobs=4).output[0].content[0].logprobs
    assert len(lps) == 8 and all(len(e.top_logprobs) == 4 for e in lps)
    bare = ask(oai, include=LOGPROBS).output[0].content[0].logprobs
    assert len(bare) == 8 and all(e.top_logprobs == [] for e in bare)


@pytest.mark.parametrize("body,needle", [
    ({"top_logprobs": 21}, "'top_logprobs' must be between 0 and 20, got 21"),
    ({"top_logprobs": -1}, "'top_logprobs' must be between 0 and 20, got -1"),
    ({"top_logprobs": "3"}, "'top_logprobs' must be an integer"),
    ({"include": "message.output_text.logprobs"}, "'include' must be"),
    ({"include": [7]}, "include[0] must be a string"),
])
def test_bad_values_get_a_400_naming_the_field(oai, body, needle):
    with pytest.raises(openai.BadRequestError) as e:
        oai.post("/responses", body={"model": "m", "input": "hi", **body}, cast_to=Response)
    assert needle in e.value.body["message"], e.value.body


# ----- only the text's tokens: not the reasoning's, not a call's -----

THOUGHT, TEXT = "Plan it", "Warm today"
ARGUMENTS = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
MARKUP = ("<think>", "</think>", "<tool_call>", "</tool_call>", ARGUMENTS)   # whole tokens: a script's differ


def scripted_client(factory, answer: str):
    """A live server on a real tiny model that always answers `answer` (MARKUP's pieces whole tokens): its client."""
    model = scripted_model(factory, answer, ctx_len=2048, n_vocab=512, seed=3, added_tokens=MARKUP)
    with LiveServer(model=str(model), ctx=2048, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def thinker(tiny_model_factory):
    """A real tiny model that always answers "<think>Plan it</think>Warm today<tool_call>{...}</tool_call>"."""
    yield from scripted_client(tiny_model_factory, f"<think>{THOUGHT}</think>{TEXT}<tool_call>{ARGUMENTS}</tool_call>")


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_and_markup_tokens_are_left_out(thinker, stream):
    kw = dict(tools=[WEATHER], include=LOGPROBS, top_logprobs=1, max_output_tokens=200)
    if stream:
        events = list(ask(thinker, "weather?", stream=True, **kw))
        r = events[-1].response
        deltas = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    else:
        r = ask(thinker, "weather?", **kw)
    assert [o.type for o in r.output] == ["reasoning", "message", "function_call"], r.output
    assert r.output[1].content[0].text == TEXT and json.loads(r.output[2].arguments) == {"city": "Oslo"}
    lps = r.output[1].content[0].logprobs
    assert text_of(lps) == TEXT           # the text's tokens: not the reasoning's, not the call's
    assert r.usage.output_tokens > len(lps) + 5        # "<think>Plan it</think>" and the call's three
    if stream:
        assert as_tuples(deltas) == as_tuples(lps)


@pytest.fixture(scope="module")
def smol(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=4096, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.mark.parametrize("stream", [False, True])
def test_the_default_model_gives_its_texts_tokens_not_its_calls(smol, stream):
    block = "<tool_call>\n" + json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}}) + "\n</tool_call>"
    kw = dict(tools=[WEATHER], include=LOGPROBS, top_logprobs=2, max_output_tokens=60)
    # After the text, the greedy next token is the call's or the end, a near tie whose winner differs by build: the
    # AVX-512 build calls after the first prompt, the AVX2 build ends there and calls after the second
    answers = []
    for opener in ("Reply with exactly this text and nothing else:", "Copy this text exactly:"):
        prompt = f"{opener}\nChecking the weather.\n{block}"
        r = list(ask(smol, prompt, stream=True, **kw))[-1].response if stream else ask(smol, prompt, **kw)
        answers.append(r.output)
        if [o.type for o in r.output] == ["message", "function_call"]:
            break
    assert [o.type for o in r.output] == ["message", "function_call"], answers
    part = r.output[0].content[0]
    assert part.text == "Checking the weather."
    assert text_of(part.logprobs).strip() == part.text
    assert len(part.logprobs) < r.usage.output_tokens - 10     # the call's tokens are not there
    assert all(len(e.top_logprobs) == 2 for e in part.logprobs)


# ----- text after a call: its own tokens, not the call's -----

AFTER = "Oslo"       # also inside the call's arguments


@pytest.fixture(scope="module")
def caller(tiny_model_factory):
    """A real tiny model that always answers "Sure<tool_call>{... "Oslo" ...}</tool_call>Oslo"."""
    yield from scripted_client(tiny_model_factory, f"Sure<tool_call>{ARGUMENTS}</tool_call>{AFTER}")


@pytest.mark.parametrize("stream", [False, True])
def test_text_after_a_call_gets_its_own_tokens(caller, stream):
    """The message's text is the text before the call and after it: its entries are those texts' tokens (before:
    none at all unstreamed, the text was not in the answer verbatim; streamed, "Oslo" was found inside the call
    and given the call's arguments token)."""
    kw = dict(tools=[WEATHER], include=LOGPROBS, top_logprobs=1, max_output_tokens=200)
    r = list(ask(caller, "weather?", stream=True, **kw))[-1].response if stream else ask(caller, "weather?", **kw)
    assert [o.type for o in r.output] == ["message", "function_call"], r.output
    part = r.output[0].content[0]
    assert part.text == "Sure" + AFTER
    assert text_of(part.logprobs) == part.text
    assert ARGUMENTS not in [e.token for e in part.logprobs]
