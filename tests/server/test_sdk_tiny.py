"""The real `openai` and `anthropic` SDKs against a live server on the tiny model: streaming and not,
stop sequences, usage fields (cached tokens on a continued conversation), tools accepted, errors."""

from __future__ import annotations

import anthropic
import openai
import pytest

SYSTEM = "You are a terse assistant."
GREEDY = {"temperature": 0}   # this anthropic SDK has no temperature argument; the API field still exists


def chat(oai, messages, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_tokens", 12)
    return oai.chat.completions.create(model="gpt-4o-mini", messages=messages, **kw)


def test_openai_chat_non_streaming_fields(oai):
    r = chat(oai, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi"}])
    assert r.object == "chat.completion" and r.model == "gpt-4o-mini"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    timings = r.model_extra["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == r.usage.prompt_tokens
    assert timings["predicted_n"] == r.usage.completion_tokens


def test_openai_streaming_equals_non_streaming(oai):
    messages = [{"role": "user", "content": "Count to five"}]
    whole = chat(oai, messages, max_tokens=20)
    chunks = list(chat(oai, messages, max_tokens=20, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 1   # same prompt again


def test_max_tokens_and_length_finish(oai):
    r = chat(oai, [{"role": "user", "content": "Write a long story"}], max_tokens=3)
    if r.choices[0].finish_reason == "length":
        assert r.usage.completion_tokens == 3
    r = chat(oai, [{"role": "user", "content": "Write a long story"}], max_completion_tokens=5)
    assert r.usage.completion_tokens <= 5


def test_stop_sequence_cuts_the_answer(oai):
    messages = [{"role": "user", "content": "Tell me everything"}]
    full = chat(oai, messages, max_tokens=40).choices[0].message.content
    assert len(full) > 6
    stop = full[3:6]
    expected = full[: full.index(stop)]
    r = chat(oai, messages, max_tokens=40, stop=[stop])
    assert r.choices[0].message.content == expected and r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(oai, messages, max_tokens=40, stop=stop,
                                                                      stream=True) if c.choices)
    assert streamed == expected


def test_second_turn_reads_only_the_new_tokens(oai):
    first = [{"role": "system", "content": SYSTEM + " turn test"}, {"role": "user", "content": "First question?"}]
    r1 = chat(oai, first)
    second = first + [{"role": "assistant", "content": r1.choices[0].message.content},
                      {"role": "user", "content": "And a second one?"}]
    r2 = chat(oai, second)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert cached >= r1.usage.prompt_tokens
    assert r2.model_extra["timings"]["prompt_n"] == r2.usage.prompt_tokens - cached
    assert r2.model_extra["timings"]["cache_n"] == cached


def test_completions_with_text_and_token_ids(oai, tiny_server):
    r = oai.completions.create(model="any", prompt="Once upon a time", max_tokens=6, extra_body=GREEDY)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 6
    ids = tiny_server.state.engine.tokenize("Once upon a time")
    r2 = oai.completions.create(model="any", prompt=ids, max_tokens=6, extra_body=GREEDY)
    assert r2.choices[0].text == r.choices[0].text
    streamed = "".join(c.choices[0].text for c in oai.completions.create(
        model="any", prompt=ids, max_tokens=6, temperature=0, stream=True))
    assert streamed == r.choices[0].text


def test_models_lists_the_loaded_model(oai, tiny_server):
    ids = [m.id for m in oai.models.list().data]
    assert ids[0] == tiny_server.state.model_name


def test_the_anthropic_sdk_lists_the_models_with_its_fields(claude, tiny_server):
    """The Anthropic SDK's models.list() read `type`, `display_name`, `created_at` as None and no page
    fields: GET /v1/models had OpenAI's fields only, where models.retrieve had both (found trying Strata as a
    new user, session 38)."""
    page = claude.models.list()
    m = page.data[0]
    assert (m.id, m.type, m.display_name) == (tiny_server.state.model_name, "model", tiny_server.state.model_name)
    assert m.created_at.year >= 2024
    assert (page.has_more, page.first_id, page.last_id) == (False, m.id, page.data[-1].id)


def test_a_model_is_retrieved_by_any_name(oai, claude, tiny_server):
    """The SDKs' models.retrieve (GET /v1/models/{id}): any name is served, so any name is found."""
    assert oai.models.retrieve(tiny_server.state.model_name).id == tiny_server.state.model_name
    m = oai.models.retrieve("gpt-4o")
    assert m.id == "gpt-4o" and m.object == "model" and m.model_extra["served_by"] == tiny_server.state.model_name
    assert claude.models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5"


def test_tools_are_accepted_and_rendered(oai, claude):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
    r = chat(oai, [{"role": "user", "content": "Weather in Oslo?"}], tools=tools)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    plain = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": "Weather in Oslo?"}])
    with_tools = claude.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "Weather in Oslo?"}],
        tools=[{"name": "get_weather", "description": "Weather of a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}])
    assert with_tools.input_tokens > plain.input_tokens + 20   # the tools are written into the prompt
    # a tool round trip in the history renders and runs
    history = [{"role": "user", "content": "Weather in Oslo?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "12 C, rain"}]
    assert chat(oai, history, tools=tools).usage.prompt_tokens > 20


def test_streams_with_tools_give_the_same_answer(oai, claude):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "Look something up"}]
    whole = chat(oai, messages, tools=tools, max_tokens=20).choices[0].message
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(oai, messages, tools=tools, max_tokens=20,
                                                                      stream=True) if c.choices)
    assert streamed == (whole.content or "")
    a_tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    a_whole = claude.messages.create(model="m", max_tokens=20, messages=messages, tools=a_tools, extra_body=GREEDY)
    with claude.messages.stream(model="m", max_tokens=20, messages=messages, tools=a_tools, extra_body=GREEDY) as s:
        final = s.get_final_message()
    assert [b.model_dump(exclude={"id"}) for b in final.content] == [
        b.model_dump(exclude={"id"}) for b in a_whole.content]


def test_openai_errors_come_back_as_sdk_exceptions(oai):
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai, [{"role": "user", "content": "x"}], max_tokens=-3)
    assert "max_tokens" in str(e.value)


def test_anthropic_message_non_streaming(claude):
    r = claude.messages.create(model="claude-agent-test", max_tokens=10, system=SYSTEM,
                               messages=[{"role": "user", "content": "Hello"}], extra_body=GREEDY)
    assert r.type == "message" and r.role == "assistant" and r.model == "claude-agent-test"
    assert r.content[0].type == "text" and r.stop_reason in ("end_turn", "max_tokens")
    assert r.usage.output_tokens <= 10
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens > 5


def test_anthropic_stream_event_sequence_and_text(claude):
    kw = dict(model="m", max_tokens=15, messages=[{"role": "user", "content": "Stream please"}], extra_body=GREEDY)
    whole = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as stream:
        kinds = [ev.type for ev in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
    assert final.content[0].text == whole.content[0].text
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.cache_read_input_tokens >= 1


def test_anthropic_stop_sequences_and_second_turn(claude):
    base = [{"role": "user", "content": "Tell me a thing"}]
    r1 = claude.messages.create(model="m", max_tokens=30, messages=base, extra_body=GREEDY)
    text = r1.content[0].text
    assert len(text) > 5
    stop = text[2:5]
    r = claude.messages.create(model="m", max_tokens=30, messages=base, extra_body=GREEDY, stop_sequences=[stop])
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == text[: text.index(stop)]
    turn2 = base + [{"role": "assistant", "content": text}, {"role": "user", "content": "More"}]
    r2 = claude.messages.create(model="m", max_tokens=5, messages=turn2, extra_body=GREEDY)
    n_first = claude.messages.count_tokens(model="m", messages=base).input_tokens
    assert r2.usage.cache_read_input_tokens >= n_first


def test_anthropic_assistant_prefill_is_continued(claude, oai):
    """A last assistant message is the start of the answer (Anthropic's prefill): the model continues
    it, as the same text sent raw to /v1/completions does; it is not closed as a finished turn."""
    messages = [{"role": "user", "content": "Name a colour"}, {"role": "assistant", "content": "The colour is"}]
    r = claude.messages.create(model="m", max_tokens=8, messages=messages, extra_body=GREEDY)
    raw = "<|im_start|>user\nName a colour<|im_end|>\n<|im_start|>assistant\nThe colour is"
    c = oai.completions.create(model="m", prompt=raw, max_tokens=8, temperature=0)
    assert r.content[0].text == c.choices[0].text
    assert claude.messages.count_tokens(model="m", messages=messages).input_tokens == c.usage.prompt_tokens
    with claude.messages.stream(model="m", max_tokens=8, messages=messages, extra_body=GREEDY) as stream:
        assert "".join(stream.text_stream) == c.choices[0].text


def test_claude_codes_billing_header_does_not_break_the_prefix(claude):
    """Claude Code's first system block changes every request (`cch=`); it is dropped, so the next turn
    reuses the history instead of reading it all again."""
    def system(cch):
        return [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.37.0d9; cc_entrypoint=cli; cch={cch};"},
                {"type": "text", "text": "You are Claude Code. " + "Follow the house rules. " * 20,
                 "cache_control": {"type": "ephemeral"}}]
    turn1 = [{"role": "user", "content": "List the files"}]
    r1 = claude.messages.create(model="m", max_tokens=6, system=system("fa690"), messages=turn1, extra_body=GREEDY)
    turn2 = turn1 + [{"role": "assistant", "content": r1.content[0].text}, {"role": "user", "content": "Next"}]
    r2 = claude.messages.create(model="m", max_tokens=6, system=system("1c8b4"), messages=turn2, extra_body=GREEDY)
    first_prompt = r1.usage.input_tokens + r1.usage.cache_read_input_tokens
    assert r2.usage.cache_read_input_tokens >= first_prompt, (r1.usage, r2.usage)
    plain = [{"type": "text", "text": "You are Claude Code. " + "Follow the house rules. " * 20}]
    count = claude.messages.count_tokens(model="m", system=system("0000a"), messages=turn1).input_tokens
    assert count == claude.messages.count_tokens(model="m", system=plain, messages=turn1).input_tokens == first_prompt
    header_in_a_string = "x-anthropic-billing-header: cch=12345;\n" + plain[0]["text"]
    assert claude.messages.count_tokens(model="m", system=header_in_a_string, messages=turn1).input_tokens == count


def test_system_blocks_are_separate_lines(claude):
    """Claude Code's "...for Claude." and "You are an interactive..." blocks are two lines, not one run."""
    from strata.server.anthropic_text import parse_system

    blocks = [{"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": "You are an interactive tool."}]
    assert parse_system({"system": blocks}) == "You are Claude Code.\nYou are an interactive tool."
    turn = [{"role": "user", "content": "hi"}]
    assert claude.messages.count_tokens(model="m", system=blocks, messages=turn).input_tokens == \
        claude.messages.count_tokens(model="m", system="You are Claude Code.\nYou are an interactive tool.",
                                     messages=turn).input_tokens


def test_anthropic_tool_result_blocks_are_accepted(claude):
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 C"}]},
    ]
    r = claude.messages.create(model="m", max_tokens=5, messages=messages, extra_body=GREEDY, tools=[
        {"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}])
    assert r.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_an_image_in_a_tool_result_becomes_a_note_not_an_error(claude):
    """A tool that read an image file (Claude Code's Read on a PNG) returns an image block; a 400 would stop
    the agent's session for good, since every later turn resends it."""
    def history(result_blocks):
        return [{"role": "user", "content": "Look at logo.png"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "Read",
                                                   "input": {"file_path": "logo.png"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": result_blocks}]}]
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    tools = [{"name": "Read", "description": "d", "input_schema": {"type": "object"}}]
    r = claude.messages.create(model="m", max_tokens=3, tools=tools, messages=history([image]), extra_body=GREEDY)
    assert r.usage.output_tokens >= 1
    note = {"type": "text", "text": "[image omitted: this model reads text only]"}
    assert (claude.messages.count_tokens(model="m", tools=tools, messages=history([image])).input_tokens
            == claude.messages.count_tokens(model="m", tools=tools, messages=history([note])).input_tokens)
    with pytest.raises(anthropic.BadRequestError):    # an image the user sends is still refused
        claude.messages.create(model="m", max_tokens=3, messages=[{"role": "user", "content": [image]}])


def test_anthropic_errors_come_back_as_sdk_exceptions(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=5, messages=[])
    assert "messages" in str(e.value)


def test_anthropic_history_with_reasoning_and_server_tool_blocks_is_accepted(claude):
    """Claude Code keeps thinking and server-side tool blocks in its history; they are skipped, not refused."""
    messages = [
        {"role": "user", "content": "Find it"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Found."}]},
        {"role": "user", "content": [{"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral"}}]},
    ]
    r = claude.messages.with_raw_response.create(model="m", max_tokens=3, messages=messages, extra_body=GREEDY)
    assert r.http_response.status_code == 200


def test_aliases_are_listed_and_any_name_is_served(tiny_model):
    from tests.server.live import LiveServer

    with LiveServer(model=str(tiny_model), ctx=512, batch=0, threads=1, conversation_cache_mib=0,
                    alias="gpt-4o, claude-sonnet-4-5") as s:
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        assert [m.id for m in client.models.list().data] == [s.state.model_name, "gpt-4o", "claude-sonnet-4-5"]
        r = client.chat.completions.create(model="some-model-nobody-has", max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}],
                                           extra_body={"ignore_eos": True})   # a sampled first token may end it
        assert r.model == "some-model-nobody-has" and r.usage.completion_tokens == 2


def test_logit_bias_bans_and_forces_tokens(oai, tiny_server):
    """OpenAI's logit_bias through the SDK: -100 on the greedy answer's first token changes it, +100 on
    a token makes the answer that token over and over."""
    engine = tiny_server.state.engine
    plain = oai.completions.create(model="m", prompt=[5, 6, 7], max_tokens=4, temperature=0,
                                   extra_body={"ignore_eos": True})
    first = engine.tokenize(plain.choices[0].text, special=True)[0]
    banned = oai.completions.create(model="m", prompt=[5, 6, 7], max_tokens=4, temperature=0,
                                    logit_bias={str(first): -100}, extra_body={"ignore_eos": True})
    assert engine.tokenize(banned.choices[0].text, special=True)[0] != first
    forced = chat(oai, [{"role": "user", "content": "hi"}], max_tokens=5, logit_bias={"100": 100},
                  extra_body={"ignore_eos": True})
    assert forced.choices[0].message.content == engine.detokenize([100] * 5)


def held_for(server, seconds: float, send) -> tuple:
    """send()'s result while the server's worker is held for `seconds` (it takes no request meanwhile), and
    the monotonic time of the release."""
    import threading
    import time

    sched = server.state.scheduler
    held, release = threading.Event(), threading.Event()
    gate = sched.call(lambda: (held.set(), release.wait(60)))
    assert held.wait(30)
    out: list = []
    worker = threading.Thread(target=lambda: out.append(send()))
    worker.start()
    time.sleep(seconds)
    released = time.monotonic()
    release.set()
    gate.result(30)
    worker.join(60)
    return out[0], released


def raw_stream(server, path: str, body: dict) -> list:
    """(line, monotonic time) of each non-empty line of a streamed response."""
    import time

    import httpx2 as httpx

    with httpx.stream("POST", server.url + path, json=body, timeout=60) as r:
        return [(line, time.monotonic()) for line in r.iter_lines() if line]


def test_a_quiet_chat_stream_sends_keepalive_comments_the_sdk_skips(oai, tiny_server, monkeypatch):
    """A chat stream waiting for a context (or reading a long prompt) sends nothing for as long: an HTTP
    client's read timeout (the openai SDK's 600 s, aider's through litellm) ends it. After KEEPALIVE_S
    (0.05 s here) the stream begins, then gets an SSE comment every KEEPALIVE_S, which the SDK skips."""
    import json

    from strata.server import openai_api

    monkeypatch.setattr(openai_api, "KEEPALIVE_S", 0.05)
    messages = [{"role": "user", "content": "Say hi"}]
    plain = chat(oai, messages).choices[0].message.content
    body = {"model": "m", "messages": messages, "max_tokens": 12, "temperature": 0, "stream": True}

    def raw() -> list:
        return raw_stream(tiny_server, "/v1/chat/completions", body)

    lines, released = held_for(tiny_server, 1.5, raw)
    before = [line for line, t in lines if t < released]
    assert json.loads(before[0][6:])["choices"][0]["delta"]["role"] == "assistant"
    assert before[1:] and set(before[1:]) == {": keepalive"} and len(before) >= 4, before
    streamed, _ = held_for(tiny_server, 1.0, lambda: "".join(c.choices[0].delta.content or "" for c in chat(
        oai, messages, stream=True)))
    assert streamed == plain


def test_a_quiet_responses_stream_is_told_it_is_in_progress(oai, tiny_server, monkeypatch):
    """A Responses stream (Codex's) waiting or reading a long prompt begins after KEEPALIVE_S and then gets
    response.in_progress again every KEEPALIVE_S: Codex's idle timer counts events, not SSE comments. The
    SDK's streamed text is the same."""
    import json

    from strata.server import responses_api

    monkeypatch.setattr(responses_api, "KEEPALIVE_S", 0.05)
    body = {"model": "m", "input": "Say hi", "max_output_tokens": 12, "temperature": 0, "stream": True}
    plain = oai.responses.create(model="m", input="Say hi", max_output_tokens=12, temperature=0).output_text
    lines, released = held_for(tiny_server, 1.5, lambda: raw_stream(tiny_server, "/v1/responses", body))
    before = [json.loads(line[6:])["type"] for line, t in lines if t < released and line.startswith("data: ")]
    assert before[:2] == ["response.created", "response.in_progress"] and len(before) >= 4, before
    assert set(before[1:]) == {"response.in_progress"}
    seqs = [json.loads(line[6:])["sequence_number"] for line, _ in lines if line.startswith("data: ")]
    assert seqs == list(range(len(seqs)))
    streamed, _ = held_for(tiny_server, 1.0, lambda: "".join(
        e.delta for e in oai.responses.create(model="m", input="Say hi", max_output_tokens=12, temperature=0,
                                               stream=True) if e.type == "response.output_text.delta"))
    assert streamed == plain


CHAT_TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {"x": {"type": "string", "maxLength": 4}}, "required": ["x"]}}}
    for name in ("get_weather", "clock")]


@pytest.mark.parametrize("mode,called", [("required", ["clock"]), ("auto", [])])
def test_chat_allowed_tools_offer_that_subset(oai, mode, called):
    """openai's ChatCompletionAllowedToolChoiceParam: the allowed tools are offered, a call demanded only
    with mode 'required' (a 400 before: "'tool_choice' as an object must name a function")."""
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": [
        {"type": "function", "function": {"name": "clock"}}]}}
    r = chat(oai, [{"role": "user", "content": "What time is it?"}], tools=CHAT_TOOLS, tool_choice=choice,
             max_tokens=200)
    assert [c.function.name for c in r.choices[0].message.tool_calls or []] == called, r.choices[0].message


def test_chat_allowed_tools_naming_no_offered_tool_is_a_400(oai):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "nope"}}]}}
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai, [{"role": "user", "content": "hi"}], tools=CHAT_TOOLS, tool_choice=choice)
    assert "tool_choice.allowed_tools.tools[0] names 'nope', which is not in 'tools'" in e.value.body["message"]


def test_chat_allowed_tools_without_a_name_is_a_400_saying_so(oai):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {}}]}}
    with pytest.raises(openai.BadRequestError) as e:
        chat(oai, [{"role": "user", "content": "hi"}], tools=CHAT_TOOLS, tool_choice=choice)
    assert "tool_choice.allowed_tools.tools[0]: each tool needs a non-empty string 'name'; got None" in \
        e.value.body["message"]
