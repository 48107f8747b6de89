"""Fields SDK users send less often, through the real `openai` SDK on the tiny model (session 39's trial as a
new user): a negative `seed` (OpenAI's type is any 64-bit integer), `logprobs` beside `stop` (the entries are
those of the answer's text, not of the stop sequence cut off), streamed too."""

from __future__ import annotations

import anthropic
import openai
import pytest

ASK = [{"role": "user", "content": "Count to five."}]


@pytest.mark.parametrize("seed", [-1, -5, -(1 << 63)])
def test_a_negative_seed_is_a_seed(oai, seed):
    """OpenAI's `seed` is an int64 (its API reference: -9223372036854775808 .. 9223372036854775807); a 400 for
    -1 stopped clients that send it (llama.cpp's "random"). The same seed gives the same sampled answer."""
    kw = dict(model="m", messages=ASK, max_tokens=12, temperature=1.0, seed=seed)
    first = oai.chat.completions.create(**kw).choices[0].message.content
    assert oai.chat.completions.create(**kw).choices[0].message.content == first
    text = oai.completions.create(model="m", prompt="Once upon a time", max_tokens=6, temperature=1.0, seed=seed)
    assert text.choices[0].text


def test_a_seed_past_int64_is_refused(oai):
    with pytest.raises(openai.BadRequestError, match="'seed' must be between -9223372036854775808 and"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=2, seed=1 << 63)


def _stop_inside(oai) -> tuple[str, str]:
    """A stop string the greedy answer meets after its first few tokens, beginning where a token begins, and
    the answer's text before it."""
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0, logprobs=True)
    entries = r.choices[0].logprobs.content
    text = r.choices[0].message.content
    at = 0
    for i, e in enumerate(entries):
        piece = bytes(e.bytes).decode("utf-8", "replace")
        if i >= 3 and piece.strip() and len(text) - at >= 2:
            stop = text[at:at + 2]
            if text.find(stop) == at:
                return stop, text[:at]
        at += len(piece)
    pytest.skip("no stop string found in the tiny model's answer")


def _joined(entries) -> str:
    return bytes(b for c in entries for b in c.bytes).decode("utf-8", "replace")


def test_logprobs_stop_where_the_stop_sequence_cut_the_answer(oai):
    """The tokens that wrote the stop sequence came back in `logprobs.content` (the answer's text "123", its
    entries "1" .. "5" for stop "45"); now the entries are the answer's tokens, as llama.cpp gives them."""
    stop, before = _stop_inside(oai)
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0, logprobs=True,
                                    top_logprobs=2, stop=[stop])
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.content == before
    assert _joined(r.choices[0].logprobs.content) == before
    # the legacy shape: the tokens (and their offsets) of the text kept
    kw = dict(model="m", prompt="Once upon a time", max_tokens=16, temperature=0, logprobs=1)
    whole = oai.completions.create(**kw).choices[0]
    offsets, text = whole.logprobs.text_offset, whole.text
    i = next((i for i in range(3, len(offsets)) if text[offsets[i]:offsets[i] + 2].strip()
              and len(text) - offsets[i] >= 2 and text.find(text[offsets[i]:offsets[i] + 2]) == offsets[i]), None)
    if i is None:
        pytest.skip("no stop string found in the tiny model's completion")
    cut = oai.completions.create(stop=[text[offsets[i]:offsets[i] + 2]], **kw).choices[0]
    assert cut.finish_reason == "stop" and cut.text == text[:offsets[i]]
    assert cut.logprobs.text_offset == offsets[:i] and cut.logprobs.tokens == whole.logprobs.tokens[:i]

def test_streamed_logprobs_stop_where_the_stop_sequence_cut_the_answer(oai):
    stop, before = _stop_inside(oai)
    chunks = list(oai.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0, logprobs=True,
                                              stop=[stop], stream=True, stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    entries = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
    assert text == before and _joined(entries) == before
    # without a stop every token's entry is still sent, the last ones at the end
    chunks = list(oai.chat.completions.create(model="m", messages=ASK, max_tokens=24, temperature=0, logprobs=True,
                                              stream=True, stream_options={"include_usage": True}))
    entries = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
    assert len(entries) == chunks[-1].usage.completion_tokens


def test_completions_stream_include_usage_ends_with_a_usage_chunk(oai):
    """OpenAI's `stream_options.include_usage` on /v1/completions: one more chunk before [DONE], `choices` empty,
    with the usage (its API reference; chat completions did so, completions ignored the option and put the usage
    on the finish chunk). Not asked, the finish chunk still carries it, as before."""
    kw = dict(model="m", prompt="Once upon a time", max_tokens=4, temperature=0, stream=True)
    chunks = list(oai.completions.create(stream_options={"include_usage": True}, **kw))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4
    assert chunks[-2].choices[0].finish_reason == "length" and chunks[-2].usage is None
    assert all(ch.choices for ch in chunks[:-1])
    chunks = list(oai.completions.create(**kw))
    assert chunks[-1].choices[0].finish_reason == "length" and chunks[-1].usage.completion_tokens == 4
    with pytest.raises(openai.BadRequestError, match="'stream_options.include_usage' must be a boolean"):
        oai.completions.create(stream_options={"include_usage": "yes"}, **kw)


def test_responses_input_tokens_counts_the_prompt_a_response_reads(oai):
    """`POST /v1/responses/input_tokens` (openai's `responses.input_tokens.count`) was a 404; it counts the prompt a
    response to the same body reads (instructions, items, tools), as Anthropic's count_tokens does."""
    tools = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    ask = dict(model="m", instructions="Be brief.", input=[{"role": "user", "content": "Weather in Paris?"}],
               tools=tools)
    counted = oai.responses.input_tokens.count(**ask)
    assert counted.object == "response.input_tokens"
    r = oai.responses.create(max_output_tokens=2, **ask)
    assert counted.input_tokens == r.usage.input_tokens
    assert oai.responses.input_tokens.count(model="m", input="Hi").input_tokens < counted.input_tokens
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        oai.responses.input_tokens.count(model="m", input="Hi", previous_response_id="resp_1")


def test_the_model_object_says_the_longest_prompt(claude, tiny_server):
    """Anthropic's model object has `max_input_tokens` (the longest prompt) and `lifecycle` (its SDK's type
    requires it); both were missing, so a client sizing its conversation from `models.retrieve` (llm-anthropic's
    refresh registers unknown models so) learned nothing. The longest prompt is the one the "prompt is too long"
    400 names: --ctx less the answer's token."""
    for m in (claude.models.retrieve("claude-sonnet-4-5"), claude.models.list().data[0]):
        assert (m.lifecycle, m.max_input_tokens) == ("active", tiny_server.state.engine.context_capacity(0) - 1)
    assert claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "word " * 5000}]) \
        .input_tokens > m.max_input_tokens
    with pytest.raises(anthropic.BadRequestError, match=f"> {m.max_input_tokens} maximum"):
        claude.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": "word " * 5000}])


def test_a_parallel_tool_calls_of_another_type_is_named_in_jsons_words(oai, claude):
    """The 400 said Python's type, "got str" / "got int"; now the value, as the other fields' 400s say it."""
    with pytest.raises(openai.BadRequestError, match="'parallel_tool_calls' must be a boolean, got \"no\""):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=2, parallel_tool_calls="no")
    with pytest.raises(openai.BadRequestError, match="'parallel_tool_calls' must be a boolean, got 1"):
        oai.responses.create(model="m", input="hi", max_output_tokens=2, parallel_tool_calls=1)
    with pytest.raises(anthropic.BadRequestError, match="disable_parallel_tool_use' must be a boolean, got \"yes\""):
        claude.messages.create(model="m", max_tokens=2, messages=ASK, tools=[{"name": "f", "input_schema": {}}],
                               tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"})


def test_top_p_zero_keeps_the_likeliest_token(oai, claude):
    """OpenAI's `top_p` is bounded [0, 1] (its API reference), and 0 was a 400 here ("between 1e-09 and 1"): a
    client asking for determinism so was refused. 0 keeps the likeliest token alone: at temperature 1 the answer
    is the greedy one, on chat, completions and Anthropic's messages."""
    kw = dict(model="m", messages=ASK, max_tokens=12)
    greedy = oai.chat.completions.create(temperature=0, **kw).choices[0].message.content
    assert oai.chat.completions.create(temperature=1.0, top_p=0, **kw).choices[0].message.content == greedy
    kw = dict(model="m", prompt="Once upon a time", max_tokens=8)
    assert oai.completions.create(temperature=1.0, top_p=0, **kw).choices[0].text == \
        oai.completions.create(temperature=0, **kw).choices[0].text
    kw = dict(model="m", messages=ASK, max_tokens=12)
    greedy = claude.messages.create(extra_body={"temperature": 0}, **kw).content[0].text
    assert claude.messages.create(extra_body={"temperature": 1.0, "top_p": 0}, **kw).content[0].text == greedy
    with pytest.raises(openai.BadRequestError, match="'top_p' must be between 0 and 1, got -0.1"):
        oai.chat.completions.create(top_p=-0.1, **kw)


KIND = {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}}, "required": ["kind"],
        "additionalProperties": False}


def _held_to_kind(text: str, finish: str) -> None:
    import json

    assert text.lstrip().startswith("{")
    if finish in ("stop", "completed", "end_turn"):
        assert json.loads(text) in ({"kind": "cat"}, {"kind": "dog"})


def test_a_json_schema_in_the_other_apis_shape_is_read(oai, claude):
    """Chat nests the schema (`response_format.json_schema.schema`), the Responses API and Anthropic's
    output_config.format have it flat (`text.format.schema`); a client moving between them sent the other shape
    and got "'text.format.schema' is required" for a schema it did send. Where the schema is leaves no doubt."""
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0,
                                    response_format={"type": "json_schema", "name": "pet", "schema": KIND})
    _held_to_kind(r.choices[0].message.content, r.choices[0].finish_reason)
    nested = {"type": "json_schema", "json_schema": {"name": "pet", "schema": KIND}}
    r = oai.responses.create(model="m", input="A pet?", max_output_tokens=40, temperature=0, text={"format": nested})
    _held_to_kind(r.output_text, r.status)
    m = claude.messages.create(model="m", max_tokens=40, messages=ASK,
                               extra_body={"temperature": 0, "output_config": {"format": nested}})
    _held_to_kind(m.content[0].text, m.stop_reason)
    with pytest.raises(openai.BadRequestError, match="'text.format.schema' is required"):
        oai.responses.create(model="m", input="A pet?", max_output_tokens=4, text={"format": {"type": "json_schema"}})


def test_responses_input_tokens_refuses_what_a_response_refuses(oai):
    """A body /v1/responses refuses before it reads its prompt (a malformed `text` or `text.format`, `moderation`)
    was counted here all the same: a client counting its request before sending it learned a figure for a request
    that then was a 400. Each is now the same 400 on both."""
    bad = [dict(text="json"), dict(text={"format": {"type": "json_schema", "name": "x"}}),
           dict(text={"format": {"type": "xml"}}), dict(extra_body={"moderation": {"model": "omni"}})]
    for fields in bad:
        with pytest.raises(openai.BadRequestError) as sent:
            oai.responses.create(model="m", input="Hi", max_output_tokens=2, **fields)
        with pytest.raises(openai.BadRequestError) as counted:
            oai.responses.input_tokens.count(model="m", input="Hi", **fields)
        assert counted.value.message == sent.value.message, fields


def test_a_json_schema_in_both_shapes_that_differ_is_refused(oai, claude):
    """A format with a schema in both places (chat's nested one and the flat one) took the API's own and left the
    other out without a word; two different schemas are now a 400 naming both places (the same one twice is read)."""
    other = {"type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"]}
    chat = {"type": "json_schema", "json_schema": {"name": "pet", "schema": KIND}, "schema": other}
    with pytest.raises(openai.BadRequestError,
                       match=r"'response_format.json_schema.schema' and 'response_format.schema' are two different"):
        oai.chat.completions.create(model="m", messages=ASK, max_tokens=4, response_format=chat)
    flat = {"type": "json_schema", "name": "pet", "schema": KIND, "json_schema": {"schema": other}}
    with pytest.raises(openai.BadRequestError, match=r"'text.format.schema' and 'text.format.json_schema.schema'"):
        oai.responses.create(model="m", input="A pet?", max_output_tokens=4, text={"format": flat})
    with pytest.raises(anthropic.BadRequestError, match=r"output_config.format.schema' and "):
        claude.messages.create(model="m", max_tokens=4, messages=ASK, extra_body={"output_config": {"format": flat}})
    same = {**chat, "schema": KIND}
    r = oai.chat.completions.create(model="m", messages=ASK, max_tokens=40, temperature=0, response_format=same)
    _held_to_kind(r.choices[0].message.content, r.choices[0].finish_reason)
