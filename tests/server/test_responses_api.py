"""`POST /v1/responses` (what Codex CLI speaks) through the real `openai` SDK against live servers: the
tiny model for shapes, streams, turns and errors; the default model, asked to copy a tool-call block, for
`function_call` and `custom_tool_call` items and their stream events, and a turn that feeds a tool's
output back."""

from __future__ import annotations

import json

import openai
import pytest
from openai.types.responses import Response
from strata.server.jobs import Completion
from strata.server.responses_api import _Shape, parse_tools

from tests.server.live import LiveServer

WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Applies a patch to the files"}


def ask(oai, input, **kw):
    kw.setdefault("temperature", 0)
    kw.setdefault("max_output_tokens", 12)
    return oai.responses.create(model="gpt-5-codex", input=input, **kw)


def test_a_response_is_the_same_answer_as_chat_completions(oai):
    r = ask(oai, [{"role": "user", "content": "hello there"}], instructions="Be brief.")
    chat = oai.chat.completions.create(model="m", temperature=0, max_tokens=12, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}])
    assert r.object == "response" and r.id.startswith("resp_") and r.model == "gpt-5-codex"
    assert r.output_text == chat.choices[0].message.content
    assert [o.type for o in r.output] == ["message"] and r.output[0].role == "assistant"
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    if r.usage.output_tokens == 12:       # stopped by the limit: incomplete, as OpenAI says it
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    else:
        assert r.status == "completed" and r.incomplete_details is None


def test_a_string_input_and_input_text_parts_read_the_same(oai):
    a = ask(oai, "what is a slot?")
    b = ask(oai, [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "what is a slot?"}]}])
    assert a.output_text == b.output_text and a.usage.input_tokens == b.usage.input_tokens


def test_the_stream_gives_the_same_answer_in_order(oai):
    plain = ask(oai, "tell me about caches", max_output_tokens=20)
    events = list(ask(oai, "tell me about caches", max_output_tokens=20, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          f"response.{plain.status}"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == plain.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == plain.usage.output_tokens
    assert events[-1].response.id == events[0].response.id


def test_a_continued_conversation_reuses_its_history(oai):
    first = ask(oai, [{"role": "user", "content": "first question about the build"}], instructions="Be brief.")
    history = [{"role": "user", "content": "first question about the build"},
               {"role": "assistant", "content": [{"type": "output_text", "text": first.output_text}]},
               {"role": "user", "content": "and a second one"}]
    second = ask(oai, history, instructions="Be brief.")
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens


def test_tool_items_and_tools_are_accepted(oai):
    """A history with a function call, its output, a custom tool call and reasoning; function, custom and
    hosted tools (the hosted one is left out: the model cannot run it)."""
    items = [{"role": "user", "content": "what is the weather in Oslo?"},
             {"type": "reasoning", "id": "rs_1", "summary": []},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": "12 degrees, rain"},
             {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
             {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Done"}]
    r = ask(oai, items, tools=[WEATHER, PATCH, {"type": "web_search"}], tool_choice="auto")
    assert r.status in ("completed", "incomplete") and r.usage.input_tokens > 40
    without = ask(oai, items[:1], tools=[WEATHER, PATCH])
    assert r.usage.input_tokens > without.usage.input_tokens


@pytest.mark.parametrize("body,needle", [
    ({"input": "hi", "previous_response_id": "resp_1"}, "keeps no responses; send the whole conversation"),
    ({"input": ""}, "'input' must not be empty"),
    ({}, "'input' is required"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item references need stored responses"),
    ({"input": [{"type": "banana"}]}, "input[0].type 'banana' is not supported"),
    ({"input": [{"role": "wizard", "content": "x"}]}, "input[0].role must be one of"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input_image"),
    ({"input": [{"type": "function_call", "name": "f", "arguments": {"a": 1}}]},
     "input[0].arguments: expected a string (JSON text), got an object"),
    ({"input": "hi", "instructions": "x", "tools": [{"type": "function", "name": ""}]}, "name must be a non-empty"),
    ({"input": "hi", "tool_choice": {"type": "function", "name": "nope"}}, "'tool_choice' names a tool"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function"}},
     "'tool_choice.name' is required for a tool_choice of type 'function'"),
    ({"input": "hi", "tool_choice": {"type": "custom"}}, "'tool_choice.name' is required for a tool_choice of type "
                                                         "'custom'"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": 7}},
     "'tool_choice.name' must be a non-empty string, got 7"),
    ({"input": "hi", "max_output_tokens": 0}, "'max_output_tokens' must be between 1 and"),
    ({"input": "hi", "temperature": 3}, "'temperature' must be between 0 and 2"),
    ({"input": "word " * 5000}, "maximum context length is 4096 tokens"),
])
def test_bad_requests_get_a_400_that_says_why(oai, body, needle):
    with pytest.raises(openai.BadRequestError) as e:
        oai.post("/responses", body={"model": "m", **body}, cast_to=Response)
    assert needle in e.value.body["message"], e.value.body
    if "tool_choice" in body:
        assert e.value.body["param"] == "tool_choice" and e.value.body["type"] == "invalid_request_error"


def test_the_shape_validates_as_the_sdks_response():
    done = Completion(text='Checking.\n<tool_call>\n{"name": "apply_patch", "arguments": {"input": "*** Begin"}}'
                           '\n</tool_call>', tokens=list(range(9)), finish_reason="stop", stop_sequence=None, prompt_tokens=50,
                      cached_tokens=30, prompt_ms=5.0, predicted_ms=9.0)
    tools, custom = parse_tools({"tools": [PATCH]})
    shape = _Shape({"instructions": "x", "tools": [PATCH]}, "m", tools, custom)
    r = Response.model_validate(shape.response(done, shape.output(done)))
    assert [o.type for o in r.output] == ["message", "custom_tool_call"]
    assert r.output[0].content[0].text == "Checking." and r.output[1].input == "*** Begin"
    assert r.usage.input_tokens_details.cached_tokens == 30 and r.status == "completed"
    assert r.usage.input_tokens_details.cache_write_tokens == 20


# ----- the default model copies a tool-call block, which becomes the call items -----

def copy_request(call: dict) -> str:
    block = "<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
    return f"Reply with exactly this text and nothing else:\n{block}"


@pytest.fixture(scope="module")
def smol(default_model_path):
    with LiveServer(model=str(default_model_path), ctx=4096, batch=2, threads=1, conversation_cache_mib=0) as s:
        yield openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_a_text_stream_passes_the_sdks_own_checks(smol):
    plain = smol.responses.create(model="m", input="Say hello in five words.", temperature=0, max_output_tokens=40)
    assert plain.status == "completed"
    with smol.responses.stream(model="m", input="Say hello in five words.", temperature=0,
                               max_output_tokens=40) as s:
        texts = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()      # the SDK's state machine checks the event sequence
    assert "".join(texts) == final.output_text == plain.output_text


def test_a_function_call_and_its_output_fed_back(smol):
    ask_call = copy_request({"name": "get_weather", "arguments": {"city": "Oslo"}})
    r = smol.responses.create(model="m", input=ask_call, tools=[WEATHER], temperature=0, max_output_tokens=40)
    assert [o.type for o in r.output] == ["function_call"], r.output
    call = r.output[0]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Oslo"}
    assert call.call_id.startswith("call_") and call.status == "completed"
    turn2 = [{"role": "user", "content": ask_call}, call.model_dump(exclude_none=True),
             {"type": "function_call_output", "call_id": call.call_id, "output": "12 degrees and rain"}]
    r2 = smol.responses.create(model="m", input=turn2, tools=[WEATHER], temperature=0, max_output_tokens=30)
    assert r2.usage.input_tokens_details.cached_tokens >= r.usage.input_tokens
    assert r2.output_text


def test_streamed_calls_send_their_argument_events(smol):
    ask_call = copy_request({"name": "get_weather", "arguments": {"city": "Oslo"}})
    with smol.responses.stream(model="m", input=ask_call, tools=[WEATHER], temperature=0,
                               max_output_tokens=40) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    assert final.output[0].type == "function_call" and json.loads(final.output[0].arguments) == {"city": "Oslo"}


def test_a_custom_tool_call_carries_its_text_input(smol):
    ask_call = copy_request({"name": "apply_patch", "arguments": {"input": "*** Begin Patch"}})
    r = smol.responses.create(model="m", input=ask_call, tools=[PATCH], temperature=0, max_output_tokens=40)
    assert [o.type for o in r.output] == ["custom_tool_call"], r.output
    assert r.output[0].name == "apply_patch" and r.output[0].input == "*** Begin Patch"
    with smol.responses.stream(model="m", input=ask_call, tools=[PATCH], temperature=0, max_output_tokens=40) as s:
        kinds = [e.type for e in s]
        final = s.get_final_response()
    assert "response.custom_tool_call_input.done" in kinds and final.output[0].input == "*** Begin Patch"


def test_prompt_cache_key_names_the_conversation():
    from strata.server.prompting import conversation_key
    from strata.server.responses_api import _conversation

    msgs = [{"role": "system", "content": "You are Codex."}, {"role": "user", "content": "<environment_context>"}]
    a = _conversation({"prompt_cache_key": "session-a"}, msgs)
    assert a == _conversation({"prompt_cache_key": "session-a"}, msgs[:1])    # the key alone decides
    assert a != _conversation({"prompt_cache_key": "session-b"}, msgs)
    assert _conversation({}, msgs) == _conversation({"prompt_cache_key": ""}, msgs) == conversation_key(msgs)


CLOCK = {"type": "function", "name": "clock", "description": "The time",
         "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 4}},
                        "required": ["zone"]}}


@pytest.mark.parametrize("choice,called", [
    ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "clock"}]}, ["clock"]),
    ({"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "clock"}]}, []),
])
def test_a_tool_choice_object_other_than_a_named_tool(oai, choice, called):
    """openai's ToolChoiceAllowedParam (a subset of the tools, `mode` auto or required): any tool_choice object
    demanded a call of any tool before (a call of get_weather for each). Allowed tools offer that subset,
    demanded only with `mode: required` (a hosted tool's choice is a 400: test_unserved_fields.py)."""
    r = ask(oai, "What time is it?", tools=[WEATHER, CLOCK], tool_choice=choice, max_output_tokens=200)
    assert [o.name for o in r.output if o.type == "function_call"] == called, r.output
    assert r.tool_choice.type == choice["type"]


def test_allowed_tools_naming_no_offered_tool_is_a_400(oai):
    with pytest.raises(openai.BadRequestError) as e:
        ask(oai, "hi", tools=[WEATHER], tool_choice={"type": "allowed_tools", "mode": "required",
                                                     "tools": [{"type": "function", "name": "nope"}]})
    assert "'tool_choice.tools' names 'nope', which is not in 'tools'" in e.value.body["message"], e.value.body


def test_allowed_tools_without_a_name_is_a_400_saying_so(oai):
    """Not "names None, which is not in 'tools'": the name is missing."""
    with pytest.raises(openai.BadRequestError) as e:
        ask(oai, "hi", tools=[WEATHER], tool_choice={"type": "allowed_tools", "mode": "required",
                                                     "tools": [{"type": "function"}]})
    assert "'tool_choice.tools': each tool needs a non-empty string 'name'; got None" in e.value.body["message"]
    assert e.value.body["param"] == "tool_choice"
