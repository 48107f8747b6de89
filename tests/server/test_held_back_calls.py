"""A streamed answer whose text is held back (a tool call being written: AnswerStream sends it whole at
the end) writes nothing to its client for as long as the call lasts, while its tokens keep the job's
event queue busy. JobEvents never waited long enough (0.25 s) to look whether the client was still
there: a client that left went on costing a slot until the next keepalive write failed (10 s later), or
to the end of the answer. And the Responses stream's keepalive came only after 10 s without an event,
so a long call (Codex's apply_patch on a CPU) sent nothing at all until it was whole: Codex drops a
stream after 300 s without an event. On a live server (real engine, real scheduler thread) whose
worker is slowed to a step every 20 ms with `Scheduler.call`, so that an answer lasts long enough."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tests.server.live import LiveServer

STEP_S = 0.02
TOOLS = [{"type": "function", "function": {"name": "write", "parameters": {
    "type": "object", "properties": {"text": {"type": "string", "minLength": 5000}}, "required": ["text"]}}}]


@pytest.fixture(scope="module")
def server(tiny_model):
    with LiveServer(model=str(tiny_model), ctx=4096, batch=0, threads=1, conversation_cache_mib=0) as s:
        yield s


def slow_steps(sched) -> threading.Event:
    """Sleeps STEP_S on the worker thread between every two steps until the returned event is set."""
    done = threading.Event()

    def turn() -> None:
        if not done.is_set():
            time.sleep(STEP_S)
            sched.call(turn)

    sched.call(turn)
    return done


def test_a_client_gone_while_its_call_is_held_back_is_cancelled_at_once(server):
    import json

    sched = server.state.scheduler
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS,
                       "tool_choice": "required", "max_tokens": 1900, "temperature": 0, "stream": True}).encode()
    done = slow_steps(sched)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            got = b""
            while b'"role":"assistant"' not in got:     # the stream began: the call is being written
                got += s.recv(65536)
            deadline = time.monotonic() + 60
            while not sched.in_flight and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(20 * STEP_S)                     # some of the call written, held back
        deadline = time.monotonic() + 60
        while sched.in_flight and time.monotonic() < deadline:     # the answer ends, one way or the other
            time.sleep(0.01)
        (rec,) = list(sched.requests)[-1:]
    finally:
        done.set()
    # cancelled within a few steps of the close (67 tokens in all here), not at the keepalive 10 s (500
    # steps) later; the bound leaves a loaded machine 4 s to see the close
    assert rec["status"] == "cancelled" and rec["output_tokens"] < 300, rec


def test_a_responses_stream_holding_a_call_back_is_told_it_is_in_progress(server, monkeypatch):
    """While a call is written (2 s here: 100 tokens, 20 ms a step) response.in_progress comes every
    KEEPALIVE_S (0.2 s here); before, only the first one, then nothing until the call was whole."""
    import json

    import httpx2 as httpx
    from strata.server import responses_api

    monkeypatch.setattr(responses_api, "KEEPALIVE_S", 0.2)
    tools = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"]}
             for t in TOOLS]
    body = {"model": "m", "input": "go", "tools": tools, "tool_choice": "required", "max_output_tokens": 100,
            "temperature": 0, "stream": True}
    done = slow_steps(server.state.scheduler)
    try:
        with httpx.stream("POST", server.url + "/v1/responses", json=body, timeout=60) as r:
            kinds = [json.loads(line[6:])["type"] for line in r.iter_lines() if line.startswith("data: ")]
    finally:
        done.set()
    held = kinds[:kinds.index("response.output_item.added")]
    assert held[0] == "response.created" and set(held[1:]) == {"response.in_progress"}
    assert len(held) >= 4, held
    assert kinds[-1] == "response.incomplete"
