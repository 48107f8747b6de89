"""Each answer names its request's number (`X-Strata-Request`), the one the log, /v1/slots' decisions and
/v1/monitor's requests[] use. A trial agent with a side request between turns (session 20) could not tell
which decision was its own: its answers carried only their `chatcmpl-...` / `msg_...` ids, named nowhere
on the server's side, so /v1/slots' `reused` could be checked against `cached_tokens` only while nothing
else ran."""

from __future__ import annotations

import threading

import httpx2 as httpx

HEADER = "x-strata-request"
SYSTEM = "You are a careful assistant. " * 40


def decision_of(url: str, number: int) -> dict:
    decisions = httpx.get(url + "/v1/slots", timeout=30).json()["decisions"]
    return next(d for d in decisions if d["request"] == number and not d["park"] and not d["park_skip"])


def test_an_openai_answer_names_the_request_its_decision_and_monitor_entry_describe(tiny_server, oai):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "count to ten"}]
    first = oai.chat.completions.with_raw_response.create(model="tiny", messages=messages, max_tokens=3,
                                                          temperature=0)
    again = oai.chat.completions.with_raw_response.create(model="tiny", messages=messages, max_tokens=3,
                                                          temperature=0)
    numbers = [int(first.headers[HEADER]), int(again.headers[HEADER])]
    assert numbers[1] > numbers[0]
    cached = again.parse().usage.prompt_tokens_details.cached_tokens
    assert cached > 0 and decision_of(tiny_server.url, numbers[1])["reused"] == cached
    requests = httpx.get(tiny_server.url + "/v1/monitor", timeout=30).json()["requests"]
    mine = next(r for r in requests if r["id"] == numbers[1])
    assert mine["reused_tokens"] == cached and mine["api"] == "openai"


def test_a_stream_names_its_request_on_both_apis(tiny_server, oai, claude):
    with oai.chat.completions.with_streaming_response.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True) as r:
        number = int(r.headers[HEADER])
        list(r.iter_lines())
    assert decision_of(tiny_server.url, number)["request"] == number
    with claude.messages.with_streaming_response.create(
            model="tiny", max_tokens=2, messages=[{"role": "user", "content": "hi"}], stream=True) as r:
        number = int(r.headers[HEADER])
        list(r.iter_lines())
    requests = httpx.get(tiny_server.url + "/v1/monitor", timeout=30).json()["requests"]
    assert next(q for q in requests if q["id"] == number)["api"] == "anthropic"


def test_two_requests_at_once_each_find_their_own_decision(tiny_server):
    """What the header is for: with another conversation running, the last decision is not one's own."""
    got: dict[str, tuple[int, int]] = {}

    def ask(who: str) -> None:
        r = httpx.post(tiny_server.url + "/v1/chat/completions", timeout=60, json={
            "model": "tiny", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "system", "content": f"{who}: {SYSTEM}"}, {"role": "user", "content": "go on"}]})
        assert r.status_code == 200, r.text
        got[who] = (int(r.headers[HEADER]), r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])

    for _ in range(2):      # the second round reuses each one's first
        threads = [threading.Thread(target=ask, args=(who,)) for who in ("alice", "bob")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got["alice"][0] != got["bob"][0]
        for number, cached in got.values():
            assert decision_of(tiny_server.url, number)["reused"] == cached


def test_a_request_refused_before_it_ran_names_none(tiny_server):
    r = httpx.post(tiny_server.url + "/v1/chat/completions", json={"messages": [], "max_tokens": 2}, timeout=30)
    assert r.status_code == 400 and HEADER not in r.headers
    r = httpx.get(tiny_server.url + "/health", timeout=30)
    assert r.status_code == 200 and HEADER not in r.headers


def test_a_request_the_full_queue_refused_names_none(tiny_model):
    """A 503 'the queue is full' never ran nor waited: the log, /v1/slots and /v1/monitor have no entry for it,
    so a number on it would name nothing (it carried the number its job was given before the queue refused it)."""
    from tests.server.live import LiveServer
    from tests.server.sched_stress import Pause

    with LiveServer(model=str(tiny_model), ctx=1024, batch=0, threads=1, queue=0, conversation_cache_mib=0) as s:
        with Pause(s.state.engine, "decode") as held:
            first = threading.Thread(target=lambda: httpx.post(s.url + "/v1/completions", timeout=60,
                                                               json={"prompt": "x", "max_tokens": 4}))
            first.start()
            assert held.entered.wait(30)
            r = httpx.post(s.url + "/v1/completions", json={"prompt": "y", "max_tokens": 2}, timeout=30)
        first.join(60)
        assert r.status_code == 503 and "the queue is full" in r.json()["error"]["message"], r.text
        assert HEADER not in r.headers, r.headers
        requests = httpx.get(s.url + "/v1/monitor", timeout=30).json()["requests"]
        assert len(requests) == 1, requests        # the first one alone: the refused one is nowhere
