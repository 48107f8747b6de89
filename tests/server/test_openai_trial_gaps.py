"""What session 39's API trial with the real `openai` SDK found wanting, on a live server with the tiny model:
legacy completions' `echo`, the Responses object echoing its request's settings, and `stream_options` without
`stream` (OpenAI's 400)."""

from __future__ import annotations

import httpx2 as httpx
import openai
import pytest

PROMPT = "Once upon a time"
GREEDY = dict(model="m", max_tokens=6, temperature=0)
ASK = [{"role": "user", "content": "Count to five."}]


# ----- echo on /v1/completions -----

def test_echo_puts_the_prompt_before_the_completion(oai, tiny_server):
    """OpenAI's legacy completions with `echo: true` answer the prompt's text, then the completion's; it was a
    400 ("'echo' is not supported"). Token ids are echoed as their decoded text."""
    plain = oai.completions.create(prompt=PROMPT, **GREEDY).choices[0]
    echoed = oai.completions.create(prompt=PROMPT, echo=True, **GREEDY).choices[0]
    assert (echoed.text, echoed.finish_reason) == (PROMPT + plain.text, plain.finish_reason)
    assert oai.completions.create(prompt=[PROMPT], echo=True, **GREEDY).choices[0].text == PROMPT + plain.text
    assert oai.completions.create(prompt=PROMPT, echo=False, **GREEDY).choices[0].text == plain.text
    engine = tiny_server.state.engine
    ids = engine.tokenize("Hello <|im_start|> world", special=True)
    from_ids = oai.completions.create(prompt=ids, echo=True, **GREEDY).choices[0].text
    text = engine.tokenizer.decode(ids)
    assert "<|im_start|>" in text and from_ids == text + oai.completions.create(prompt=ids, **GREEDY).choices[0].text


def test_a_streamed_echo_sends_the_prompt_first(oai):
    chunks = list(oai.completions.create(prompt=PROMPT, echo=True, stream=True, **GREEDY))
    plain = oai.completions.create(prompt=PROMPT, **GREEDY).choices[0].text
    assert chunks[0].choices[0].text == PROMPT and chunks[0].choices[0].finish_reason is None
    assert "".join(c.choices[0].text for c in chunks) == PROMPT + plain
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 6


def test_echo_with_suffix_is_refused_naming_both(oai):
    """A code completion's text goes between the prompt and the suffix, not after an echoed prompt: a 400 naming
    both. (`echo` with `logprobs` scores the prompt: test_prompt_scoring.py.)"""
    with pytest.raises(openai.BadRequestError, match="'echo' with 'suffix' is not supported") as e:
        oai.completions.create(prompt=PROMPT, echo=True, suffix="x", **GREEDY)
    assert e.value.body["param"] == "echo"
    with pytest.raises(openai.BadRequestError, match="'echo' must be a boolean"):
        oai.completions.create(prompt=PROMPT, echo="yes", **GREEDY)
    with pytest.raises(openai.BadRequestError, match="'echo' is not supported on chat completions"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=2, extra_body={"echo": True})


# ----- stream_options without stream -----

@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_stream_options_without_stream_is_openais_400(tiny_server, path):
    """Accepted silently before; OpenAI answers 400 with this message. A null `stream_options` (the SDK may send
    one) and a streamed request with options still pass."""
    body = {"model": "m", "max_tokens": 2, "temperature": 0,
            **({"messages": ASK} if "chat" in path else {"prompt": PROMPT})}
    for extra in ({"stream_options": {"include_usage": True}}, {"stream": False, "stream_options": {}}):
        r = httpx.post(tiny_server.url + path, json={**body, **extra}, timeout=60)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["message"] == "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        assert r.json()["error"]["param"] == "stream_options"
    assert httpx.post(tiny_server.url + path, json={**body, "stream": False, "stream_options": None},
                      timeout=60).status_code == 200
    with httpx.stream("POST", tiny_server.url + path, json={**body, "stream": True,
                                                             "stream_options": {"include_usage": True}},
                      timeout=60) as r:
        assert r.status_code == 200 and '"usage"' in r.read().decode()


def test_the_sdk_refuses_alike(oai):
    with pytest.raises(openai.BadRequestError, match="only allowed when 'stream' is enabled"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=2, stream_options={"include_usage": True})
    with pytest.raises(openai.BadRequestError, match="only allowed when 'stream' is enabled"):
        oai.completions.create(prompt=PROMPT, stream_options={"include_usage": True}, **GREEDY)


# ----- the Responses object echoes its request -----

SETTINGS = dict(
    instructions="Be brief.", max_output_tokens=5, temperature=0.5, top_p=0.9, top_logprobs=2,
    reasoning={"effort": "low", "summary": "auto"}, user="u-1", metadata={"run": "7"}, parallel_tool_calls=False,
    tool_choice="auto", tools=[{"type": "function", "name": "ls", "description": "List files",
                                "parameters": {"type": "object", "properties": {}}}],
    text={"format": {"type": "text"}, "verbosity": "low"}, truncation="auto", store=True, safety_identifier="s-1",
    prompt_cache_key="k-1", max_tool_calls=3, include=["message.output_text.logprobs"])
ECHOED = dict(SETTINGS, store=False, previous_response_id=None, background=False, service_tier="default")
ECHOED.pop("include")


def _settings(r) -> dict:
    got = r.model_dump(exclude_unset=True)     # the fields as the server sent them
    return {k: got[k] for k in ECHOED}


def test_the_response_object_echoes_the_requests_settings(oai):
    """`reasoning`, `user`, `top_logprobs` (and text.verbosity, truncation, previous_response_id, ...) were
    missing from the object, or said a default where the request set them; `store` says false: nothing is kept
    here, whatever the request asked."""
    r = oai.responses.create(model="m", input="Hi", **SETTINGS)
    assert _settings(r) == ECHOED
    events = list(oai.responses.create(model="m", input="Hi", stream=True, **SETTINGS))
    created = next(e for e in events if e.type == "response.created").response
    final = events[-1].response
    assert events[-1].type in ("response.completed", "response.incomplete")
    assert _settings(created) == _settings(final) == ECHOED


def test_left_out_settings_echo_openais_defaults(oai):
    r = oai.responses.create(model="m", input="Hi", max_output_tokens=2)
    assert _settings(r) == dict(
        instructions=None, max_output_tokens=2, temperature=1.0, top_p=1.0, top_logprobs=0,
        reasoning={"effort": None, "summary": None}, user=None, metadata={}, parallel_tool_calls=True,
        tool_choice="auto", tools=[], text={"format": {"type": "text"}, "verbosity": "medium"},
        truncation="disabled", store=False, safety_identifier=None, prompt_cache_key=None, max_tool_calls=None,
        previous_response_id=None, background=False, service_tier="default")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("truncation", "sometimes", "'truncation' must be 'auto' or 'disabled', got \"sometimes\""),
    ("metadata", "x", "'metadata' must be an object like {\"key\": \"value\"}, got \"x\""),
    ("reasoning", "low", "'reasoning' must be an object like {\"effort\": \"low\"}, got \"low\""),
    ("user", 5, "'user' must be a string, got number"),
    ("text", {"verbosity": 1}, "text.verbosity: expected a string, got 1"),
    ("text", "json", "'text' must be an object like {\"format\": {\"type\": \"text\"}}, got \"json\""),
])
def test_a_setting_only_echoed_is_checked(oai, field, value, message):
    """Echoed, a value of the wrong type would come back to a client that cannot read it: a 400 naming it, on
    /v1/responses and its token count alike."""
    with pytest.raises(openai.BadRequestError) as sent:
        oai.responses.create(model="m", input="Hi", max_output_tokens=2, extra_body={field: value})
    with pytest.raises(openai.BadRequestError) as counted:
        oai.responses.input_tokens.count(model="m", input="Hi", extra_body={field: value})
    assert message in sent.value.message and counted.value.message == sent.value.message


@pytest.mark.parametrize("tier", ["flex", "priority", "auto", "default"])
def test_service_tier_says_the_tier_that_answered(oai, tier):
    """OpenAI's object names the tier that served the request, which may differ from the one asked for; this
    server has one. Echoing "flex" or "priority" told the client it was served (and billed) so."""
    r = oai.responses.create(model="m", input="Hi", max_output_tokens=2, service_tier=tier)
    assert r.service_tier == "default"
    with pytest.raises(openai.BadRequestError, match="'service_tier' must be a string"):
        oai.responses.create(model="m", input="Hi", max_output_tokens=2, extra_body={"service_tier": 1})
