"""Malformed tool parts of a conversation on the three APIs (docs/api.md, "Tool calls and results: what is
checked"), through the real `openai` and `anthropic` SDKs on a live tiny server (their Python types are not
enforced at run time, so a wrong-typed body reaches the server as the client wrote it).

A value of the wrong type is a 400 in the API's own error shape that names the field's place, the type
expected and the value, worded alike wherever the field appears; null reads as the field left out. A
structural mismatch real agents produce (a result whose call is gone after a compaction, a call the user
interrupted) is accepted and said once per server at INFO."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import openai
import pytest
from strata.server.tool_pairing import NO_ID, UNANSWERED, UNKNOWN_ID, Unpaired, unpaired

from tests.server.live import LiveServer

USER = {"role": "user", "content": "hi"}


def chat_call(args: Any = "{}", cid: Any = "c1", **function: Any) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": "f", "arguments": args, **function}}]}


def chat_result(**fields: Any) -> dict:
    return {"role": "tool", "tool_call_id": "c1", "content": "ok", **fields}


def tool_use(**fields: Any) -> dict:
    block = {"type": "tool_use", "id": "t1", "name": "f", "input": {}, **fields}
    return {"role": "assistant", "content": [{k: v for k, v in block.items() if v != "left out"}]}


def tool_result(**fields: Any) -> dict:
    block = {"type": "tool_result", "tool_use_id": "t1", "content": "ok", **fields}
    return {"role": "user", "content": [{k: v for k, v in block.items() if v != "left out"}]}


def fn_call(**fields: Any) -> dict:
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", **fields}
    return {k: v for k, v in item.items() if v != "left out"}


def fn_output(**fields: Any) -> dict:
    item = {"type": "function_call_output", "call_id": "c1", "output": "ok", **fields}
    return {k: v for k, v in item.items() if v != "left out"}


# ----- a value of the wrong type: a 400 naming the place, the type and the value -----

CHAT_WRONG = [
    ([USER, chat_call(args={"a": 1}), chat_result()],
     "messages[1].tool_calls[0].function.arguments: expected a string (JSON text), got an object"),
    ([USER, chat_call(args=5), chat_result()],
     "messages[1].tool_calls[0].function.arguments: expected a string (JSON text), got 5"),
    ([USER, chat_call(cid=7), chat_result()], "messages[1].tool_calls[0].id: expected a string, got 7"),
    ([USER, chat_call(), chat_result(tool_call_id=7)], "messages[2].tool_call_id: expected a string, got 7"),
    ([USER, chat_call(), chat_result(name=False)], "messages[2].name: expected a string, got false"),
    ([USER, chat_call(), chat_result(content=None)], "messages[2].content is required"),
    ([USER, {**chat_call(), "tool_calls": {"id": "c1"}}, chat_result()],
     "messages[1].tool_calls: expected an array of tool calls, got an object"),
    ([USER, {"role": "assistant", "content": "x", "reasoning_content": 5}, USER],
     "messages[1].reasoning_content: expected a string, got 5"),
]

MESSAGES_WRONG = [
    ([USER, tool_use(), tool_result(is_error="yes")], "messages[2].content[0].is_error: expected a boolean, got \"yes\""),
    ([USER, tool_use(input="ls -la"), tool_result()], "messages[1].content[0].input: expected an object, got \"ls -la\""),
    ([USER, tool_use(input=[1]), tool_result()], "messages[1].content[0].input: expected an object, got an array"),
    ([USER, tool_use(id=7), tool_result()], "messages[1].content[0].id: expected a string, got 7"),
    ([USER, tool_use(name="left out"), tool_result()], "messages[1].content[0].name is required"),
    ([USER, tool_use(), tool_result(tool_use_id=7)], "messages[2].content[0].tool_use_id: expected a string, got 7"),
    ([USER, tool_use(), tool_result(content=5)],
     "messages[2].content[0].content: expected a string or an array of content blocks, got 5"),
    ([USER, tool_use(), tool_result(content={"type": "text", "text": "ok"})],
     "messages[2].content[0].content: expected a string or an array of content blocks, got an object"),
]

RESPONSES_WRONG = [
    ([USER, fn_call(call_id=7), fn_output()], "input[1].call_id: expected a string, got 7"),
    ([USER, fn_call(), fn_output(call_id=7)], "input[2].call_id: expected a string, got 7"),
    ([USER, fn_call(), fn_output(output=None)], "input[2].output is required"),
    ([USER, fn_call(), fn_output(output="left out")], "input[2].output is required"),
    ([{"role": "user", "content": None}], "input[0].content is required"),
    ([USER, {"type": "custom_tool_call", "call_id": "c1", "name": "f", "input": 5}, fn_output()],
     "input[1].input: expected a string, got 5"),
]


@pytest.mark.parametrize(("messages", "said"), CHAT_WRONG, ids=[s.split(":")[0] for _, s in CHAT_WRONG])
def test_chat_completions_name_the_field_of_the_wrong_type(oai, messages, said):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=messages, max_tokens=2)
    assert e.value.body["message"] == said
    assert e.value.body["param"] == said.split(":")[0].removesuffix(" is required")


@pytest.mark.parametrize(("messages", "said"), MESSAGES_WRONG, ids=[s.split(":")[0] for _, s in MESSAGES_WRONG])
def test_messages_name_the_field_of_the_wrong_type(claude, messages, said):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", messages=messages, max_tokens=2)
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error", "message": said}}


@pytest.mark.parametrize(("items", "said"), RESPONSES_WRONG, ids=[s.split(":")[0] for _, s in RESPONSES_WRONG])
def test_responses_name_the_field_of_the_wrong_type(oai, items, said):
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input=items, max_output_tokens=2)
    assert e.value.body["message"] == said


def test_a_call_id_of_the_wrong_type_is_said_alike_on_every_api(oai, claude):
    """The same field in its three places: the same words after the place."""
    said = []
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", messages=[USER, chat_call(cid=True), chat_result()], max_tokens=2)
    said.append(e.value.body["message"])
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", messages=[USER, tool_use(id=True), tool_result()], max_tokens=2)
    said.append(e.value.body["error"]["message"])
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="m", input=[USER, fn_call(call_id=True), fn_output()], max_output_tokens=2)
    said.append(e.value.body["message"])
    assert [s.split(": ", 1)[1] for s in said] == ["expected a string, got true"] * 3, said


# ----- null reads as the field left out -----

def test_null_where_a_field_may_be_left_out_reads_as_left_out(claude, oai):
    """An Anthropic tool_result's content, is_error and a tool_use's input may be left out: null reads the
    same (the content null was a 400, the left-out content an empty result). A chat call's null arguments
    are no arguments, as left out."""
    def tokens(use: dict, result: dict) -> int:
        return claude.messages.count_tokens(model="m", messages=[USER, use, result]).input_tokens

    left_out = tokens(tool_use(input="left out"), tool_result(content="left out", is_error="left out"))
    assert tokens(tool_use(input=None), tool_result(content=None, is_error=None)) == left_out
    assert tokens(tool_use(), tool_result(content="", is_error=False)) == left_out

    def prompt(call: dict) -> int:
        return oai.chat.completions.create(model="m", messages=[USER, call, chat_result()],
                                           max_tokens=1).usage.prompt_tokens

    bare = chat_call()
    del bare["tool_calls"][0]["function"]["arguments"]
    assert prompt(chat_call(args=None)) == prompt(bare) == prompt(chat_call(args="{}"))


# ----- structural mismatches: accepted, said once per server -----

@pytest.fixture
def fresh_server(tiny_model):
    """A server of its own: what it said once is not said again for the rest of the module."""
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1) as live:
        yield live


def call(*ids: str) -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"id": i, "function": {"name": "f"}} for i in ids]}


def result(cid: str) -> dict:
    return {"role": "tool", "tool_call_id": cid, "content": "ok"}


PAIRING = [
    ([USER, call("a", "b"), result("a"), result("b"), USER], []),
    ([USER, call("a"), USER, result("a")], []),                      # a result later than the next turn: paired
    ([USER, call("a"), result("z")], [Unpaired(UNANSWERED, "a"), Unpaired(UNKNOWN_ID, "z")]),
    ([result("a"), USER, call("a")], [Unpaired(UNKNOWN_ID, "a")]),   # the call comes after its result
    ([USER, call("a", "b"), result("b")], [Unpaired(UNANSWERED, "a")]),
    ([USER, call("a")], []),                                         # the last message's calls: results to come
    ([USER, call(""), result("")], [Unpaired(NO_ID, "")]),           # a call without an id is not paired
]


@pytest.mark.parametrize(("messages", "found"), PAIRING)
def test_which_results_and_calls_do_not_pair(messages, found):
    assert unpaired(messages) == found


UNKNOWN, UNANSWERED_SAID, NO_ID_SAID = "which no earlier tool call has", \
    "has no result and the conversation goes on", "a tool result has no call id"


def said_lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "strata.server" and r.levelno == logging.INFO and words in r.getMessage()]


def test_results_and_calls_that_do_not_pair_are_answered_and_said_once(fresh_server, caplog):
    caplog.set_level(logging.INFO, logger="strata.server")
    oai = openai.OpenAI(base_url=fresh_server.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    claude = anthropic.Anthropic(base_url=fresh_server.url, api_key="unused", max_retries=0, timeout=60)
    compacted = [USER, chat_call(cid="kept"), chat_result(tool_call_id="gone"), USER]   # the call went with a cut
    interrupted = [USER, chat_call(cid="stopped"), USER]                               # no result, the user spoke
    for _ in range(2):
        assert oai.chat.completions.create(model="m", messages=compacted, max_tokens=1).choices
        assert oai.chat.completions.create(model="m", messages=interrupted, max_tokens=1).choices
        assert claude.messages.create(model="m", max_tokens=1, messages=[
            USER, tool_use(id="t1"), tool_result(tool_use_id="t9"), tool_use(id="t2"), USER]).content is not None
        assert oai.responses.create(model="m", max_output_tokens=1, input=[
            USER, fn_call(call_id="c1"), fn_output(call_id="left out")]).output is not None
    unknown, unanswered, no_id = (said_lines(caplog, w) for w in (UNKNOWN, UNANSWERED_SAID, NO_ID_SAID))
    assert len(unknown) == 1 and "'gone'" in unknown[0] and unknown[0].startswith("/v1/chat/completions: "), unknown
    assert len(unanswered) == 1 and "'kept'" in unanswered[0], unanswered    # the first request's call
    assert len(no_id) == 1 and no_id[0].startswith("/v1/responses: "), no_id


def test_the_anthropic_api_says_its_own_mismatches(fresh_server, caplog):
    caplog.set_level(logging.INFO, logger="strata.server")
    claude = anthropic.Anthropic(base_url=fresh_server.url, api_key="unused", max_retries=0, timeout=60)
    claude.messages.create(model="m", max_tokens=1, messages=[USER, tool_use(id="t1"), tool_result(tool_use_id="t9")])
    claude.messages.create(model="m", max_tokens=1, messages=[USER, tool_use(id="t2"), USER])
    unknown, unanswered = said_lines(caplog, UNKNOWN), said_lines(caplog, UNANSWERED_SAID)
    assert len(unknown) == 1 and "'t9'" in unknown[0] and unknown[0].startswith("/v1/messages: "), unknown
    assert len(unanswered) == 1 and "'t1'" in unanswered[0], unanswered   # t1 has no result either; t2 not said
