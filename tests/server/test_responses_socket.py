"""The Responses API over a WebSocket (`GET /v1/responses`, server/responses_socket.py), spoken as the OpenAI
Agents SDK 0.24.0's websocket transport and openai 3.57's `responses.connect()` speak it (both were run
against Strata; their frames are the shapes here): `response.create` frames in, one JSON text frame an
event out, each event validated as the `openai` SDK's ResponsesServerEvent. Before, the upgrade was a 405
and the SDK's run failed ("server rejected WebSocket connection: HTTP 405")."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from tests.server.live import LiveServer
from tests.server.test_openai_agent_frameworks import ANSWER, INSTRUCTIONS, STRICT_TOOLS, USER, agent_model

EVENT = TypeAdapter(ResponsesServerEvent)
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture(scope="module")
def server(tiny_model_factory):
    with LiveServer(model=str(agent_model(tiny_model_factory)), ctx=4096, batch=2, threads=1,
                    conversation_cache_mib=0) as s:
        yield s


def create(input, **kw) -> dict:
    """The frame the Agents SDK sends: its Responses body with type response.create (no stream field)."""
    return {"type": "response.create", "model": "local", "instructions": INSTRUCTIONS, "input": input,
            "tools": STRICT_TOOLS, "include": [], "max_output_tokens": 200, "temperature": 0.0, **kw}


async def answer(ws, frame: dict | str) -> list:
    """Sends one frame and reads the events up to a terminal one, each checked as the SDK's type."""
    await (ws.send_str(frame) if isinstance(frame, str) else ws.send_json(frame))
    events = []
    while not events or events[-1].type not in TERMINAL:
        msg = await asyncio.wait_for(ws.receive(), 30)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        events.append(EVENT.validate_python(json.loads(msg.data)))
    return events


def run(server, talk):
    async def main():
        async with aiohttp.ClientSession() as session, session.ws_connect(server.url + "/v1/responses") as ws:
            return await talk(ws)
    return asyncio.run(main())


def test_a_tool_loop_on_one_socket(server):
    async def talk(ws):
        first = await answer(ws, create([{"role": "user", "content": USER}]))
        call = first[-1].response.output[0]
        history = [{"role": "user", "content": USER},
                   {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments,
                    "id": call.id, "status": "completed"},
                   {"type": "function_call_output", "call_id": call.call_id, "output": "1 failed"}]
        return first, await answer(ws, create(history))

    first, second = run(server, talk)
    for events in (first, second):
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
        assert events[-1].type == "response.completed"
    call = first[-1].response.output[0]
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "run_tests", {})
    assert [e.type for e in first if e.type.startswith("response.function_call_arguments")] == [
        "response.function_call_arguments.delta", "response.function_call_arguments.done"]
    done = second[-1].response
    assert done.output_text == ANSWER
    assert "".join(e.delta for e in second if e.type == "response.output_text.delta") == ANSWER
    u1 = first[-1].response.usage
    assert done.usage.input_tokens_details.cached_tokens == u1.input_tokens + u1.output_tokens   # all reused


def test_the_same_events_as_the_http_stream(server):
    import httpx2 as httpx

    frame = create([{"role": "user", "content": USER}])
    over_socket = run(server, lambda ws: answer(ws, frame))
    body = {k: v for k, v in frame.items() if k != "type"} | {"stream": True}
    lines = httpx.post(server.url + "/v1/responses", json=body, timeout=30).text.splitlines()
    over_http = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert [e.type for e in over_socket] == [e["type"] for e in over_http]


def test_a_bad_frame_is_an_error_frame_and_the_socket_goes_on(server):
    async def talk(ws):
        errors = [(await answer(ws, frame))[-1] for frame in (
            create("x", previous_response_id="resp_1"), "not json", json.dumps([1]),
            {"type": "response.steer", "input": "x"}, create([{"role": "wizard", "content": "x"}]))]
        return errors, await answer(ws, create([{"role": "user", "content": USER}]))

    errors, after = run(server, talk)
    assert [(e.type, e.status) for e in errors] == [("error", 400)] * 5
    assert errors[0].error.param == "previous_response_id" and "keeps no responses" in errors[0].error.message
    assert "not JSON" in errors[1].error.message and "JSON object" in errors[2].error.message
    assert "'response.steer' is not supported" in errors[3].error.message
    assert "input[0].role must be one of" in errors[4].error.message
    assert after[-1].type == "response.completed"


def test_a_plain_get_is_told_to_upgrade_or_post(server):
    import httpx2 as httpx

    r = httpx.get(server.url + "/v1/responses", timeout=10)
    assert r.status_code == 405 and "POST /v1/responses" in r.json()["error"]["message"]


def test_closing_the_socket_cancels_the_answer(tiny_server):
    """The random tiny model, greedy, writes to max_output_tokens unless stopped (sampled, it ends after
    80-220 tokens: the close could come after the end)."""
    import httpx2 as httpx

    def cancelled() -> int:
        text = httpx.get(tiny_server.url + "/metrics", timeout=10).text
        return sum(int(float(line.split()[-1])) for line in text.splitlines()
                   if line.startswith('strata_requests_total{status="cancelled"}'))

    before = cancelled()

    async def talk(ws):
        await ws.send_json({"type": "response.create", "model": "m", "input": "go", "max_output_tokens": 4000,
                            "temperature": 0})
        while json.loads((await ws.receive()).data)["type"] != "response.output_text.delta":
            pass
        await ws.close()

    run(tiny_server, talk)
    deadline = time.monotonic() + 60      # the cancel is seen at the next token: at once, but CI may be slow
    while cancelled() == before and time.monotonic() < deadline:
        asyncio.run(asyncio.sleep(0.05))
    assert cancelled() == before + 1
    assert httpx.post(tiny_server.url + "/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 3},
                      timeout=30).status_code == 200


def test_an_idle_socket_does_not_hold_the_stop(tiny_model):
    """aiohttp waits for open handlers at shutdown; an idle socket's waited its full timeout (60 s)."""
    import threading

    server = LiveServer(model=str(tiny_model), ctx=512, batch=0, threads=1, conversation_cache_mib=0).start()
    opened, got = threading.Event(), []

    async def client():
        async with aiohttp.ClientSession() as session, session.ws_connect(server.url + "/v1/responses") as ws:
            opened.set()
            got.append((await ws.receive()).type)

    thread = threading.Thread(target=lambda: asyncio.run(client()))
    thread.start()
    assert opened.wait(10)
    start = time.monotonic()
    server.stop()
    thread.join(10)
    assert time.monotonic() - start < 5 and got == [aiohttp.WSMsgType.CLOSE]


def test_a_frame_is_read_as_a_post_body_is(server):
    """A frame's JSON gets the body's checks (fields.parse_json_body): nesting past 100 levels is an error
    frame (5,000 levels raised RecursionError out of the handler and the socket died with no answer; 200
    were taken, which a POST refuses), and a lone UTF-16 surrogate (a JavaScript agent's tool output cut
    inside an emoji) is read as U+FFFD, as over HTTP (the socket died)."""
    deep = json.dumps(create("x"))[:-1] + ', "metadata": ' + "[" * 5000 + "]" * 5000 + "}"
    less_deep = json.dumps(create("x"))[:-1] + ', "metadata": ' + "[" * 200 + "]" * 200 + "}"
    cut = json.dumps(create([{"role": "user", "content": USER + " \ud83d"}]))     # json.dumps writes \ud83d

    async def talk(ws):
        return [(await answer(ws, frame))[-1] for frame in (deep, less_deep, cut)]

    deep_end, less_deep_end, cut_end = run(server, talk)
    for e in (deep_end, less_deep_end):
        assert (e.type, e.status) == ("error", 400) and "more than 100 deep" in e.error.message
    assert cut_end.type == "response.completed"
