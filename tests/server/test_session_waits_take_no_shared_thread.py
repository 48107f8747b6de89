"""A session save or restore waiting for its context to be idle (up to SESSION_IDLE_WAIT_S, 30 s) holds the thread it
waits on all that time. Those threads were the event loop's default executor's (min(32, cores + 4): 6 on two cores),
which also renders every chat prompt (prompting.render_chat_async) and runs the stop (app._on_shutdown): with that
many waiting (clients that gave up and asked again: a waiting call carries on without its client), every chat
request and the stop waited until they gave up. Session calls now wait on threads of their own
(server/cache/http.py). Real server on the tiny model, its tokens slowed so that main stays busy."""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
from strata.server.cache.http import SESSION_BACKEND

from tests.server.test_cache_and_policy import ids
from tests.server.test_session_waits_for_idle import (
    _restore,
    _saved,
    _server,
    _SlowTokens,
    _Stream,
    _wait_for,
)

WAITING = 33   # more than the default executor's threads on any machine (at most 32)


def test_restores_waiting_for_main_hold_up_no_chat_request(tiny_model, tmp_path):
    with _server(tiny_model, tmp_path) as s:
        sched = s.state.scheduler
        _saved(s)
        s.app[SESSION_BACKEND].idle_wait_s = 20.0
        sched.eos.clear()
        with _SlowTokens(s.state.engine):
            a = _Stream(s.url, ids(20, 81), 1500)                 # main busy for ~30 s
            _wait_for(lambda: a.lines > 0, "the stream's first token")
            answers: list[int] = []
            for _ in range(WAITING):
                threading.Thread(target=lambda: answers.append(_restore(s.url, "work").status_code),
                                 daemon=True).start()
            _wait_for(lambda: len(sched._deferred) >= 6, "the restores to wait for main")
            time.sleep(1.0)                                     # the rest taken by threads too
            t0 = time.monotonic()
            r = httpx.post(s.url + "/v1/chat/completions", timeout=60, json={
                "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1, "temperature": 0})
            took = time.monotonic() - t0
            assert r.status_code == 200, r.text
            assert took < 5.0, f"the chat request waited {took:.1f} s behind the session calls' threads"
            assert not answers and not a.done.is_set()           # all of it while the restores waited
            a.leave.set()
            assert a.done.wait(60)
            _wait_for(lambda: len(answers) == WAITING, "every restore's answer", 120)
        assert answers.count(200) == WAITING, answers
