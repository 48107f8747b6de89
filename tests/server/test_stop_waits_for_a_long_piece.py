"""A stop during a long prompt piece (a big model on the CPU reads 2,048 tokens in about a minute) waits for
the engine call as long as the measured prefill rate says, saying so every few seconds (the app ends a server
that says nothing of its stop for 15 s, and the conversations then in the contexts were lost), then keeps the
histories; a piece far past that is taken as a stuck call and the contexts are left alone. The worker is
held in `Engine.prefill` before the real call (sched_stress.Pause): a forward under way is interrupted by the stop
(tests/server/test_stop_interrupts_the_piece.py), so the piece read is the second turn's, and what is kept is
the history before it. The waits are scaled down."""

from __future__ import annotations

import logging
import threading
import time

import openai
import pytest
from strata.server import stop_progress

from tests.server.live import LiveServer
from tests.server.sched_stress import Pause

SYSTEM = "You are a terse coding agent. " + "Keep every answer short. " * 20


def test_a_stop_waits_for_a_long_prompt_piece_saying_so_then_keeps_the_history(tiny_model, tmp_path, caplog,
                                                                               monkeypatch):
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    lines, kept = stop_during_a_piece(tiny_model, tmp_path, caplog, rate=50.0, hold_s=2.0)
    assert len(lines) >= 3, lines                      # every 0.2 s for the 2 s held
    assert lines[0].startswith("stopping: finishing the prompt piece under way ("), lines
    assert kept, "the history read when the stop came was not kept"


def test_a_piece_far_past_its_measured_time_is_left_as_stuck(tiny_model, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    lines, kept = stop_during_a_piece(tiny_model, tmp_path, caplog, rate=1e6, hold_s=3.0)
    assert any("has not ended after" in line for line in lines), lines
    assert not kept


def test_the_step_after_a_long_piece_is_timed_from_the_piece_s_end(tiny_model, tmp_path, caplog, monkeypatch):
    """The allowance was taken from the step under way at each look but timed from the stop's start: once a long
    piece ended, the short call after it (its first token's logits, a decode step) was held to the slack alone
    with the piece's minutes counted against it, and a look falling inside it gave the histories up as stuck."""
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 2.5)
    lines, kept = stop_during_a_piece(tiny_model, tmp_path, caplog, rate=50.0, hold_s=3.0, then_s=0.5)
    assert not any("has not ended after" in line for line in lines), lines
    assert kept, "the history read when the stop came was not kept"


def test_the_second_stop_at_shutdown_does_not_wait_again_for_a_step_given_up(tiny_model, tmp_path, caplog,
                                                                             monkeypatch):
    """The server stops twice (aiohttp's on_shutdown, then the cleanup): once the first gave a stuck step up
    (its histories said not kept), the second waited its whole allowance again (2 more minutes for a first
    prompt's piece). A later call keeps the histories only if the step has ended by then."""
    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 64}
    with caplog.at_level(logging.INFO, logger="strata.server"):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, **flags) as server:
            sched = server.state.scheduler
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)
            with Pause(sched.engine, "prefill", when=lambda ctx, part, **k: len(part) > 100) as pause:
                threading.Thread(target=lambda: _ask(client), daemon=True).start()
                assert pause.entered.wait(60)
                sched.prefill_rate = 1e6
                sched.stop(every_s=0.2)                   # gives the held piece up
                given_up = len(caplog.records)
                sched.stop(every_s=0.2)                   # the second call, the piece still held
                again = [r.getMessage() for r in caplog.records[given_up:] if r.getMessage().startswith("stopping")]
                pause.release.set()
    assert again == [], again


def test_a_session_save_under_way_is_waited_for_then_the_histories_kept(tiny_model, tmp_path, caplog, monkeypatch):
    """A session save or restore runs on the worker thread (a big context's is gigabytes written or read: half
    a minute): the stop gave it the slack of a decode step (10 s), took it for a stuck call and kept no history,
    and the cache then closed while the save still wrote. It gets the allowance of a piece of unknown rate."""
    import httpx2 as httpx

    monkeypatch.setattr(stop_progress, "STEP_WAIT_SLACK_S", 0.3)
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 64,
             "conversation_cache_sessions_dir": str(tmp_path / "sessions")}
    with caplog.at_level(logging.INFO, logger="strata.server"):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, **flags) as server:
            sched = server.state.scheduler
            _ask(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60))
            with Pause(server.state.cache, "save_session") as pause:
                saving = threading.Thread(target=lambda: httpx.post(server.url + "/v1/sessions/work/save",
                                                                    json={"slot": "main"}, timeout=60), daemon=True)
                saving.start()
                assert pause.entered.wait(60)
                stopper = threading.Thread(target=sched.stop, kwargs={"every_s": 0.2})
                stopper.start()
                time.sleep(1.5)                           # the save goes on, past the slack
                pause.release.set()
                stopper.join(60)
            kept = sum(server.state.cache.parks.values()) > 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: ")]
    assert not any("has not ended after" in line for line in lines), lines
    assert any("session" in line for line in lines), lines
    assert kept, "the history in main was not kept"
    assert list((tmp_path / "sessions").glob("*.img")), "the session was not saved"


def test_a_session_save_taken_with_one_under_way_is_not_started_once_the_stop_came(tiny_model, tmp_path):
    """The worker takes every call waiting between two steps at once. A stop refuses the calls still waiting
    (bfb881c: 503) and waits for the one under way (b1877ef), but the others taken with it were then run after
    the stop began, each a whole context's KV written or read (a big one's: half a minute) while the stop
    waited. Those get the same 503 as a call still waiting."""
    import httpx2 as httpx

    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 64,
             "conversation_cache_sessions_dir": str(tmp_path / "sessions")}
    with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, **flags) as server:
        sched = server.state.scheduler
        _ask(openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60))
        busy, free = threading.Event(), threading.Event()
        sched.call(lambda: (busy.set(), free.wait(60)))       # the worker held, so that both saves queue
        assert busy.wait(60)
        answers: dict[str, int] = {}

        def save(name: str) -> None:
            answers[name] = httpx.post(f"{server.url}/v1/sessions/{name}/save", json={"slot": "main"},
                                       timeout=60).status_code
        savers = [threading.Thread(target=save, args=(name,), daemon=True) for name in ("one", "two")]
        for t in savers:
            t.start()
        deadline = time.monotonic() + 60
        while len(sched._calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(sched._calls) == 2
        with Pause(server.state.cache, "save_session") as pause:
            free.set()                                         # the worker takes both saves, the first held
            assert pause.entered.wait(60)
            stopper = threading.Thread(target=sched.stop, kwargs={"every_s": 0.2})
            stopper.start()
            while not sched._stopping and time.monotonic() < deadline:
                time.sleep(0.01)
            pause.release.set()
            stopper.join(60)
        for t in savers:
            t.join(60)
    assert sorted(answers.values()) == [200, 503], answers
    assert len(list((tmp_path / "sessions").glob("*.img"))) == 1


@pytest.mark.parametrize("tokens,rate,wait", [(0, 100.0, 10.0), (2048, 0.0, 120.0), (2048, 34.0, 10 + 3 * 2048 / 34)])
def test_the_wait_follows_the_piece_and_its_rate(tokens, rate, wait):
    assert stop_progress.step_wait_s(tokens, rate) == pytest.approx(wait)


def stop_during_a_piece(tiny_model, tmp_path, caplog, *, rate: float, hold_s: float,
                        then_s: float = 0.0) -> tuple[list[str], bool]:
    """A stop asked while the worker reads a 100+-token prompt piece, held `hold_s`, the prefill rate set to
    `rate` tokens/s (a slow machine's); the engine call after the piece (its logits) then takes `then_s`. The
    stop's lines, and whether the history was kept at the stop."""
    flags = {"conversation_cache_warm_dir": str(tmp_path / "warm"), "conversation_cache_warm_mib": 64}
    with caplog.at_level(logging.INFO, logger="strata.server"):
        with LiveServer(model=str(tiny_model), ctx=2048, batch=0, threads=1, **flags) as server:
            sched = server.state.scheduler
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)
            first = _ask(client)            # the history a stop keeps: the second turn's piece is not read
            real_logits = sched.engine.logits

            def logits(*args, **kwargs):
                if then_s and pause.release.is_set() and not slowed:
                    slowed.append(time.sleep(then_s))
                return real_logits(*args, **kwargs)
            slowed: list = []
            sched.engine.logits = logits
            with Pause(sched.engine, "prefill", when=lambda ctx, part, **k: len(part) > 100) as pause:
                threading.Thread(target=lambda: _ask(client, first), daemon=True).start()
                assert pause.entered.wait(60)
                sched.prefill_rate = rate
                assert sum(server.state.cache.parks.values()) == 0     # kept below: by the stop
                stopper = threading.Thread(target=sched.stop, kwargs={"every_s": 0.2})
                stopper.start()
                time.sleep(hold_s)
                pause.release.set()
                stopper.join(60)
            kept = sum(server.state.cache.parks.values()) > 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("stopping: ")]
    return lines, kept


def _ask(client, before: list[dict] | None = None) -> list[dict]:
    """A first turn, or with `before` (a first turn's messages and answer) the next, with a long question: the
    messages and the answer (none when the stop ended it)."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does git bisect do?"}]
    if before is not None:
        messages = before + [{"role": "user", "content": "And how do I mark a commit? " * 30}]
    try:
        # a first turn of one token: its context holds the prompt alone, which the next turn goes on from (no
        # history displaced and parked before the stop, whatever the answer re-renders to)
        out = client.chat.completions.create(model="m", max_tokens=1 if before is None else 4, temperature=0,
                                             messages=messages)
        return messages + [{"role": "assistant", "content": out.choices[0].message.content or ""}]
    except openai.APIError:
        return messages      # the stop ends it
