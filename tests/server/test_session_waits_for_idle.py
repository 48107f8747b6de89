"""A session save or restore into a context that runs a request waits for it to end, then runs (it was a 400:
"context main is running a request; retry when it is idle", 30 of 61 restores in the agent soak). Meanwhile no
request is placed in that context, so the restore runs at its next idle moment; past the bound
(SessionBackend.idle_wait_s) the answer is a 503 with Retry-After, nothing done. Real servers on the tiny model.
"""

from __future__ import annotations

import threading
import time

import httpx2 as httpx
from strata.server.cache.http import SESSION_BACKEND

from tests.server.live import LiveServer
from tests.server.test_cache_and_policy import complete, ids


def _server(tiny_model, tmp_path) -> LiveServer:
    # main 2048 tokens, one slot of 512: a lone request runs in main, a prompt of 600 tokens only fits main
    return LiveServer(model=str(tiny_model), ctx=2048, batch=1, slot_ctx=512, threads=1, conversation_cache_mib=16,
                      conversation_cache_park_min_free_mib=0, conversation_cache_min_free_mib=0,
                      conversation_cache_sessions_dir=str(tmp_path / "sessions"))


def _wait_for(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _on_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def _restore(url: str, name: str, slot="main") -> httpx.Response:
    return httpx.post(f"{url}/v1/sessions/{name}/restore", json={"slot": slot}, timeout=120)


class _Stream:
    """A streamed completion on a thread of its own: `lines` counts its events, `leave` makes its client go."""

    def __init__(self, url: str, prompt: list[int], max_tokens: int) -> None:
        self.lines, self.done, self.leave = 0, threading.Event(), threading.Event()
        self.status: int | None = None

        def run() -> None:
            body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
            try:
                with httpx.stream("POST", url + "/v1/completions", json=body, timeout=120) as r:
                    self.status = r.status_code
                    for _ in r.iter_lines():
                        self.lines += 1
                        if self.leave.is_set():
                            break
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()


class _SlowTokens:
    """Each generated token takes 20 ms more (the engine's own calls run after): a stream lasts seconds on the
    tiny model, as an agent's does on a real one."""

    NAMES = ("decode", "step", "extend")

    def __init__(self, engine) -> None:
        self.engine = engine

    def __enter__(self) -> _SlowTokens:
        for name in self.NAMES:
            real = getattr(self.engine, name)

            def slow(*args, real=real, **kwargs):
                time.sleep(0.02)
                return real(*args, **kwargs)
            setattr(self.engine, name, slow)
        return self

    def __exit__(self, *exc) -> None:
        for name in self.NAMES:
            delattr(self.engine, name)


def _waiting_calls(sched) -> list:
    """The calls the worker holds until their context is idle (none before: a restore was refused at once)."""
    return getattr(sched, "_deferred", [])


def _saved(s: LiveServer) -> list[int]:
    """Session `work` saved from main (300 tokens read, 2 generated); main's tokens then."""
    complete(s.url, ids(300, 71))
    r = httpx.post(s.url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
    assert r.status_code == 200, r.text
    return s.state.scheduler.call(lambda: list(s.state.engine.context_tokens(0))).result(60)


def test_a_restore_into_main_waits_for_its_stream_then_runs(tiny_model, tmp_path):
    with _server(tiny_model, tmp_path) as s:
        sched = s.state.scheduler
        work = _saved(s)
        sched.eos.clear()                                   # the stream ends at its max_tokens
        with _SlowTokens(s.state.engine):
            a = _Stream(s.url, ids(20, 72), 300)
            _wait_for(lambda: a.lines > 0, "the stream's first token")
            assert sched.table.main.busy_job is not None        # it runs in main (alone)
            restoring, restored = _on_thread(lambda: _restore(s.url, "work"))
            _wait_for(lambda: _waiting_calls(sched) or restored, "the restore to wait")
            assert not restored, restored[0].text               # before: a 400 at once ("retry when it is idle")
            assert a.done.wait(120) and a.status == 200
            restoring.join(60)
            body = restored[0].json()
            assert restored[0].status_code == 200 and body["n_tokens"] == len(work), body
        assert a.lines > 300                                 # the stream was not cut short: all its tokens came
        assert sched.call(lambda: list(s.state.engine.context_tokens(0))).result(60) == work
        assert sched.table.main.conversation == "session:work"


def test_while_a_restore_waits_no_request_takes_its_context(tiny_model, tmp_path):
    """A prompt that only fits main, waiting beside the restore, is placed after it: the restore runs at main's
    first idle moment (here its stream's client leaving), while that request's stream still runs."""
    with _server(tiny_model, tmp_path) as s:
        sched = s.state.scheduler
        work = _saved(s)
        sched.eos.clear()
        with _SlowTokens(s.state.engine):
            a = _Stream(s.url, ids(20, 73), 1500)
            _wait_for(lambda: a.lines > 0, "the first stream's first token")
            restoring, restored = _on_thread(lambda: _restore(s.url, "work"))
            _wait_for(lambda: _waiting_calls(sched) or restored, "the restore to wait")
            b = _Stream(s.url, ids(600, 74), 1000)               # too long for the slot: it waits for main
            _wait_for(lambda: len(sched._waiting) == 1, "the long prompt to wait")
            assert not restored, restored[0].text
            a.leave.set()                                        # main's first idle moment
            restoring.join(60)
            assert restored and restored[0].status_code == 200, restored and restored[0].text
            assert restored[0].json()["n_tokens"] == len(work)
            assert not b.done.is_set()                           # the long prompt came after the restore, not before
            _wait_for(lambda: b.lines > 0, "the long prompt's first token")
            b.leave.set()
            assert b.done.wait(60) and b.status == 200
            assert a.done.wait(60)


def test_past_the_bound_a_503_with_retry_after_and_a_malformed_one_is_still_a_400(tiny_model, tmp_path):
    with _server(tiny_model, tmp_path) as s:
        sched = s.state.scheduler
        work = _saved(s)
        s.app[SESSION_BACKEND].idle_wait_s = 0.5
        sched.eos.clear()
        with _SlowTokens(s.state.engine):
            a = _Stream(s.url, ids(20, 75), 1500)
            _wait_for(lambda: a.lines > 0, "the stream's first token")
            t0 = time.monotonic()
            r = _restore(s.url, "work")
            assert r.status_code == 503, r.text
            assert 0.5 <= time.monotonic() - t0 < 10
            assert r.headers["Retry-After"] == "5"
            err = r.json()["error"]
            assert "context main" in err["message"] and "running a request" in err["message"], err
            r = httpx.post(s.url + "/v1/sessions/work/save", json={"slot": "main"}, timeout=60)
            assert r.status_code == 503 and "Retry-After" in r.headers, r.text
            for slot in ("two", 0, 9):                           # malformed, or no such context: a 400 at once
                t0 = time.monotonic()
                r = _restore(s.url, "work", slot)
                assert r.status_code == 400 and time.monotonic() - t0 < 0.5, (slot, r.text)
            assert not a.done.is_set()                           # all of it while the stream ran
            _wait_for(lambda: not _waiting_calls(sched), "the calls given up to be dropped")
            a.leave.set()
            assert a.done.wait(60)
            _wait_for(lambda: sched.table.main.busy_job is None, "main to be idle")
        assert sched.table.main.conversation != "session:work"   # the given-up restore did nothing
        r = _restore(s.url, "work")                          # idle: at once
        assert r.status_code == 200 and r.json()["n_tokens"] == len(work), r.text
