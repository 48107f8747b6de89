"""What the `openai` SDK (max_retries=0) gets from /v1/chat/completions, /v1/completions and /v1/responses when a
request is refused or cut: a full queue and a stopping server answer 503 with Retry-After in OpenAI's error shape
(InternalServerError, which the SDK's _should_retry retries after that wait), streamed or not; a stream a stop cuts
after it began ends with the event the SDK's parser knows: chat's and completions' `{"error": {...}}` (raised as an
APIError saying "the server is stopping"), Responses' `response.failed`. A streamed request still queued when the
stop came got a 200 stream whose only content was an error event (chat, completions: an APIError the SDK does not
retry) or a response.created ... response.failed sequence (Responses: no exception at all). Over the Responses
WebSocket the same refusals are `error` frames of status 503 with their Retry-After in `error.headers`."""

from __future__ import annotations

import asyncio
import json
import threading

import aiohttp
import openai
import pytest
from openai.types.responses.responses_server_event import ResponsesServerEvent
from pydantic import TypeAdapter

from tests.server.live import LiveServer
from tests.server.stop_scenes import refusals_around_a_stop, stream_cut_by_a_stop
from tests.server.test_cancelled_counts import hold_worker, wait_for

USER = "count to ten"
ENDPOINTS = ("chat", "completions", "responses")
STOPPING = {"message": "the server is stopping", "type": "server_error", "param": None, "code": None}


def client(s: LiveServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def ask(c: openai.OpenAI, endpoint: str, stream: bool, max_tokens: int = 4, seen: threading.Event | None = None):
    """One request; streamed, its events read to the end (`seen` set at the first text)."""
    if endpoint == "chat":
        out = c.chat.completions.create(model="tiny", max_tokens=max_tokens, stream=stream,
                                        messages=[{"role": "user", "content": USER}])
    elif endpoint == "completions":
        out = c.completions.create(model="tiny", max_tokens=max_tokens, stream=stream, prompt=USER)
    else:
        out = c.responses.create(model="tiny", max_output_tokens=max_tokens, stream=stream, input=USER)
    if not stream:
        return out
    events = []
    for event in out:
        events.append(event)
        if seen is not None and _text_of(event):
            seen.set()
    return events


def _text_of(event) -> str:
    if getattr(event, "type", None) == "response.output_text.delta":
        return event.delta
    choices = getattr(event, "choices", None) or []
    return "".join((getattr(ch, "text", None) or getattr(getattr(ch, "delta", None), "content", None) or "")
                   for ch in choices)


def refusal(c: openai.OpenAI, endpoint: str, stream: bool) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as caught:
        ask(c, endpoint, stream)
    return caught.value


def assert_retried_503(c: openai.OpenAI, e: openai.APIStatusError, retry_after: str) -> None:
    assert isinstance(e, openai.InternalServerError), type(e).__mro__
    assert e.status_code == 503 and e.type == "server_error", (e.status_code, e.type, e.message)
    assert e.response.headers["retry-after"] == retry_after
    assert c._should_retry(e.response)      # the SDK's own rule: with retries on, it would wait and ask again


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_full_queue_and_a_stopping_server_answer_503_with_retry_after(tiny_model, endpoint, stream):
    got = refusals_around_a_stop(str(tiny_model), lambda s: refusal(client(s), endpoint, stream))
    c = openai.OpenAI(api_key="unused")
    assert "the queue is full" in got["full"].message
    assert_retried_503(c, got["full"], "2")
    assert "queued" in got, "the request queued at the stop was not refused with a status"
    for when in ("queued", "late"):                # queued at the stop; submitted once it began
        assert got[when].body == STOPPING
        assert_retried_503(c, got[when], "5")


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_stream_a_stop_cuts_ends_with_the_event_the_sdk_knows(tiny_model, endpoint):
    got: dict = {}

    def read(s: LiveServer, seen: threading.Event) -> None:
        try:
            got["events"] = ask(client(s), endpoint, True, max_tokens=1000, seen=seen)
        except openai.APIError as e:
            got["error"] = e
    stream_cut_by_a_stop(str(tiny_model), read)
    if endpoint == "responses":                    # the SDK yields response.failed; it raises nothing
        assert "error" not in got, got
        last = got["events"][-1]
        assert last.type == "response.failed", [e.type for e in got["events"]]
        assert (last.response.status, last.response.error.code, last.response.error.message) == (
            "failed", "server_error", "the server is stopping")
        return
    e = got["error"]                               # raised by the SDK's stream parser: an APIError, no status
    assert type(e) is openai.APIError, type(e).__mro__
    assert e.message == "the server is stopping" and e.body == STOPPING, (e.message, e.body)


# ----- the Responses WebSocket -----

EVENT = TypeAdapter(ResponsesServerEvent)


async def _first_terminal(ws, frame: dict) -> list:
    await ws.send_json(frame)
    events = []
    while not events or events[-1].type not in ("response.completed", "response.incomplete", "response.failed",
                                                 "error"):
        msg = await asyncio.wait_for(ws.receive(), 60)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        events.append(EVENT.validate_python(json.loads(msg.data)))
    return events


def test_the_responses_socket_refuses_with_503_frames_that_carry_retry_after(tiny_model):
    create = {"type": "response.create", "model": "tiny", "input": USER, "max_output_tokens": 4}
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, queue=0, conversation_cache_mib=0) as s:
        sched = s.state.scheduler
        held, release = hold_worker(sched, 0)
        assert held.wait(60)

        async def main() -> tuple[list, list]:
            async with aiohttp.ClientSession() as session, \
                    session.ws_connect(s.url + "/v1/responses") as first, \
                    session.ws_connect(s.url + "/v1/responses") as second:
                queued = asyncio.ensure_future(_first_terminal(first, create))
                await asyncio.to_thread(wait_for, lambda: sched.queue_depth == 1)
                full = await _first_terminal(second, create)
                stopping = threading.Thread(target=sched.stop)
                stopping.start()
                await asyncio.to_thread(wait_for, lambda: sched.stopping)
                release.set()
                await asyncio.to_thread(stopping.join, 60)
                return full, await queued

        full, queued = asyncio.run(main())
    for events, message, retry_after in ((full, "the queue is full", "2"), (queued, "the server is stopping", "5")):
        assert [e.type for e in events] == ["error"], [e.type for e in events]
        e = events[0]
        assert e.status == 503 and e.error.type == "server_error" and message in e.error.message, e
        assert e.error.headers == {"retry-after": retry_after}, e.error.headers
