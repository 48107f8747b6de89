"""The worker's Outbox: events reach their stream's queue in order, a stream's first text and every
other event at the end of their step, later text merged and held for at most STREAM_COALESCE_S (one
wake-up of the event loop and one write for several tokens)."""

from __future__ import annotations

import asyncio

import pytest
from strata.engine.sampling import SamplingParams
from strata.server.jobs import STREAM_COALESCE_S, Job, Outbox


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def loop():
    lp = asyncio.new_event_loop()
    yield lp
    lp.close()


def _job(loop) -> Job:
    return Job(api="openai", prompt=[1, 2], max_tokens=8, sampling=SamplingParams(), loop=loop, events=asyncio.Queue())


def _received(loop, job) -> list:
    loop.run_until_complete(asyncio.sleep(0))    # runs the deliveries the flushes scheduled
    out = []
    while not job.events.empty():
        out.append(job.events.get_nowait())
    return out


def test_first_text_goes_at_once_later_text_waits_and_merges(loop):
    clock = Clock()
    box = Outbox(clock=clock)
    a, b = _job(loop), _job(loop)
    box.post(a, "start", {"cached_tokens": 0})
    box.post(a, "text", "Hel")
    box.flush()
    assert _received(loop, a) == [("start", {"cached_tokens": 0}), ("text", "Hel")]
    for piece in ("lo", ", ", "wor"):           # three more steps within the coalescing time
        clock.t += STREAM_COALESCE_S / 4
        box.post(a, "text", piece)
        box.flush()
    assert _received(loop, a) == []
    box.post(b, "text", "x")                     # another stream's first text goes out at once, and
    box.flush()                                  # takes the held text of the first with it
    assert _received(loop, a) == [("text", "lo, wor")] and _received(loop, b) == [("text", "x")]
    box.post(a, "text", "ld")
    clock.t += 1.5 * STREAM_COALESCE_S           # held long enough
    box.flush()
    assert _received(loop, a) == [("text", "ld")]


def test_an_event_after_text_keeps_the_order(loop):
    clock = Clock()
    box = Outbox(clock=clock)
    a = _job(loop)
    box.post(a, "text", "a")
    box.flush()
    _received(loop, a)
    box.post(a, "text", "b")
    box.post(a, "done", "completion")
    box.post(a, "text", "never merged ahead of done")
    box.flush()
    assert _received(loop, a) == [("text", "b"), ("done", "completion"), ("text", "never merged ahead of done")]


def test_force_and_bad_setting(loop):
    box = Outbox(clock=Clock())
    a = _job(loop)
    box.post(a, "text", "a")
    box.flush()
    box.post(a, "text", "b")
    box.flush(force=True)
    assert _received(loop, a) == [("text", "a"), ("text", "b")]
    with pytest.raises(ValueError, match="coalesce_s must be >= 0, got -1"):
        Outbox(coalesce_s=-1)


def test_a_job_not_streamed_gets_its_start_with_its_done(loop):
    """Its handler reads nothing before "done" (until_done): the "start" waits for it instead of waking the
    loop mid-job; a stream's "start" still goes at the end of its step."""
    clock = Clock()
    box = Outbox(clock=clock)
    quiet, streamed = _job(loop), _job(loop)
    quiet.stream = False
    box.post(quiet, "start", {"cached_tokens": 3})
    box.flush()
    assert _received(loop, quiet) == []
    box.post(streamed, "start", {"cached_tokens": 0})
    box.flush()
    assert _received(loop, streamed) == [("start", {"cached_tokens": 0})]
    box.post(quiet, "done", "completion")
    box.flush()
    assert _received(loop, quiet) == [("start", {"cached_tokens": 3}), ("done", "completion")]
