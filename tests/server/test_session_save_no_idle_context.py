"""A session saved by its messages whose history was parked to the conversation cache, while every context it would
be read back into runs a request, is a 503 that says so, with Retry-After (as a save into a busy context is), not
"not enough RAM to save": RAM had nothing to do with it, and the client's retry is what helps.

Real server on the tiny scripted model of test_session_save_by_conversation.py (main 2,048 tokens, one slot of
512): the conversation (~600 tokens) is parked to the cache when another request takes main; that request streams
slowly (20 ms a token) while the save comes, and the slot is too small for the history."""

from __future__ import annotations

import threading

import httpx2 as httpx

from tests.server.test_session_save_by_conversation import (
    _conversation,
    _save,
    _server,
    _sessions,
    answering_model,
)
from tests.server.test_session_waits_for_idle import _SlowTokens, _wait_for

__all__ = ["answering_model"]   # the module-scoped fixture, shared


def test_a_save_by_messages_with_no_idle_context_to_read_back_into_is_a_503_with_retry_after(answering_model,
                                                                                              tmp_path):
    with _server(answering_model, tmp_path) as s:
        history, _ = _conversation(s.url, 120)
        sched, answers = s.state.scheduler, []
        with _SlowTokens(s.state.engine):
            other = threading.Thread(target=lambda: answers.append(httpx.post(
                s.url + "/v1/chat/completions", timeout=120, json={
                    "messages": [{"role": "user", "content": "something else entirely"}], "max_tokens": 300,
                    "ignore_eos": True, "temperature": 0})), daemon=True)
            other.start()
            _wait_for(lambda: sched.table.main.busy_job is not None, "the other request to run in main")
            r = _save(s.url, "work", {"messages": history})
            assert other.is_alive(), "the other request ended before the save: the check proved nothing"
        other.join(120)
        assert answers and answers[0].status_code == 200
        assert r.status_code == 503, r.text
        said = r.json()["error"]["message"]
        assert "not enough RAM" not in said and "no idle context holds" in said, said   # before: "not enough RAM"
        assert r.headers.get("Retry-After") == "5", dict(r.headers)                      # before: none
        assert _sessions(s.url) == []
        # once main is idle, the same save reads the history back and saves it
        r = _save(s.url, "work", {"messages": history})
        assert r.status_code == 200 and r.json()["source"] == "ram", r.text
