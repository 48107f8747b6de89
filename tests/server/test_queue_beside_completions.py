"""--queue N counts main as free for an agent's request while only code completions run beside it: that request
takes main at once (context_choice.choose_context, "beside_completions"), so it waits for nothing. Before,
free_for counted main free only for a request alone, so --queue 0 answered an agent's request 503 while the one
slot ran an editor's completion and main sat free (--queue N: one request early). Main still is not counted
beside another agent's request, running or waiting: there choose_context gives it to neither.

Real server: a tiny model with fill-in-the-middle tokens, one slot, --queue 0; the completion made slow (20 ms a
token, 300 tokens: seconds) so that it runs while the agent's request is submitted."""

from __future__ import annotations

import threading

import httpx2 as httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_completions_leave_main import CODE, WORDS, placed
from tests.server.test_session_waits_for_idle import _SlowTokens, _wait_for


@pytest.fixture(scope="module")
def server(fim_coder):
    with LiveServer(model=str(fim_coder), ctx=4096, batch=1, slot_ctx=2048, threads=1, queue=0,
                    conversation_cache_mib=0) as s:
        yield s


def chat(s: LiveServer, content: str) -> httpx.Response:
    return httpx.post(s.url + "/v1/chat/completions", timeout=60,
                      json={"messages": [{"role": "user", "content": content}], "max_tokens": 3, "temperature": 0})


def test_an_agent_request_beside_a_running_completion_is_not_refused_by_queue_0(server):
    s, done, answer = server, threading.Event(), []

    def type_a_long_one() -> None:
        answer.append(httpx.post(s.url + "/infill", timeout=60, json={
            "input_prefix": CODE, "prompt": "z = ", "input_suffix": "\n\nprint(y)\n" * 3, "n_predict": 300,
            "ignore_eos": True, "temperature": 0}))
        done.set()

    sched = s.state.scheduler
    with _SlowTokens(s.state.engine):
        threading.Thread(target=type_a_long_one, daemon=True).start()
        _wait_for(lambda: sched.table.slots[0].busy_job is not None and sched.table.slots[0].completion,
                  "the completion to run in the slot")
        r = chat(s, WORDS * 8)
        assert r.status_code == 200, r.text                    # before: 503 "the queue is full (0 requests waiting"
        assert not done.is_set(), "the completion ended before the agent's request: the check proved nothing"
        where = placed(s, int(r.headers["x-strata-request"]))
        assert where["slot"] == "main" and where["reason"] == "beside_completions", where
        assert done.wait(60) and answer[0].status_code == 200, answer[0].text


def test_a_second_agent_request_beside_an_agent_in_main_is_still_refused_by_queue_0(server):
    # main runs an agent's request (slowed), the slot is free: a second agent's request takes the slot; a third
    # has no context (main is not free beside an agent) and --queue 0 lets none wait
    s, sched, answers = server, server.state.scheduler, []
    with _SlowTokens(s.state.engine):
        first = threading.Thread(target=lambda: answers.append(
            httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": WORDS * 6}], "max_tokens": 300, "ignore_eos": True,
                "temperature": 0})), daemon=True)
        first.start()
        _wait_for(lambda: sched.table.main.busy_job is not None, "the first agent's request to run in main")
        second = threading.Thread(target=lambda: answers.append(
            httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": "other " + WORDS * 5}], "max_tokens": 300,
                "ignore_eos": True, "temperature": 0})), daemon=True)
        second.start()
        _wait_for(lambda: sched.table.slots[0].busy_job is not None, "the second agent's request to run in the slot")
        r = chat(s, WORDS * 4)
        assert r.status_code == 503 and "the queue is full (0 requests waiting" in r.json()["error"]["message"], r.text
        assert first.is_alive() and second.is_alive(), "a request ended before the check: it proved nothing"
    first.join(60)
    second.join(60)
    assert [a.status_code for a in answers] == [200, 200]


def test_a_completion_with_every_slot_busy_and_main_free_is_not_refused_by_queue_0(server):
    # an agent's request runs in the slot (slowed), main is free: a code completion takes main at once
    # (STRATA_SLOT_EDITOR_MAIN, editor_place: editor_main), so --queue 0 lets it in. Before: free_for did not count
    # main for a completion, 503 "the queue is full (0 requests waiting" (--queue N: one request early)
    s, sched, answers = server, server.state.scheduler, []

    def agent(content: str, n: int) -> threading.Thread:
        t = threading.Thread(target=lambda: answers.append(httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": content}], "max_tokens": n, "ignore_eos": True,
            "temperature": 0})), daemon=True)
        t.start()
        return t

    with _SlowTokens(s.state.engine):
        first = agent(WORDS * 6, 10)            # alone: main
        _wait_for(lambda: sched.table.main.busy_job is not None, "the first agent's request to run in main")
        second = agent("other " + WORDS * 5, 400)   # beside it: the slot
        _wait_for(lambda: sched.table.slots[0].busy_job is not None, "the second agent's request to run in the slot")
        first.join(60)
        _wait_for(lambda: sched.table.main.busy_job is None, "main to be free")
        r = httpx.post(s.url + "/infill", timeout=60, json={
            "input_prefix": CODE, "prompt": "z = ", "input_suffix": "\n\nprint(y)\n", "n_predict": 2,
            "temperature": 0})
        assert r.status_code == 200, r.text          # before: 503 "the queue is full (0 requests waiting"
        assert second.is_alive(), "the slot's request ended before the completion: the check proved nothing"
        where = placed(s, int(r.headers["x-strata-request"]))
        assert where["slot"] == "main" and where["reason"] == "editor_main", where
    second.join(60)
    assert [a.status_code for a in answers] == [200, 200]
