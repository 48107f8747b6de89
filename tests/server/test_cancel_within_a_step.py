"""A request whose client leaves while a prompt piece is being read is dropped when that piece ends, not at
the next step: it samples no first token and takes no part in the decode that follows the piece in the same
step. An editor gives up most of its completions within a fraction of a second, each mid-prompt; before, each
still had its first token sampled and one more decode row after its client was gone.

A live server (real engine, real scheduler thread). The engine's `prefill` is wrapped so that, right after
the real call reads a chosen prompt piece, the client of a chosen request leaves (`Scheduler.cancel`, what a
disconnect does), as it would while the piece was read; decode calls are counted by their rows."""

from __future__ import annotations

import time
from typing import Any

import pytest
from strata.engine.sampling import SamplingParams
from strata.server.jobs import Job

from tests.server.live import LiveServer

PROMPT = [(i * 7) % 400 + 50 for i in range(600)]


class CancelDuringPiece:
    """The real engine, except that the first `prefill` of a context other than `not_ctx` cancels `victim` once
    it has read the piece, and `decode` records the contexts of each call."""

    def __init__(self, engine: Any, sched: Any) -> None:
        self._engine, self._sched = engine, sched
        self.not_ctx: int | None = None
        self.victim: Job | None = None
        self.victim_generated_at_cancel: int | None = None
        self.decoded: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def prefill(self, ctx: int, part: list[int], **kw: Any) -> Any:
        out = self._engine.prefill(ctx, part, **kw)
        if self.victim is not None and ctx != self.not_ctx and self.victim_generated_at_cancel is None:
            row = next((r for r in self._sched._rows.values() if r.job is self.victim), None)
            self.victim_generated_at_cancel = 0 if row is None else len(row.generated)
            self._sched.cancel(self.victim)
        return out

    def decode(self, ctxs: list[int], tokens: list[int]) -> Any:
        self.decoded.append(list(ctxs))
        return self._engine.decode(ctxs, tokens)


@pytest.fixture
def server(tiny_model):
    # mixed_piece 0: a prompt piece is read on its own and the decode follows it in the same step
    with LiveServer(model=str(tiny_model), ctx=4096, batch=2, threads=1, prefill_chunk=64, mixed_piece=0,
                    conversation_cache_mib=0) as s:
        sched = s.state.scheduler
        spy = CancelDuringPiece(sched.engine, sched)
        sched.engine = spy
        try:
            yield s, sched, spy
        finally:
            sched.engine = spy._engine


def job(prompt: list[int], max_tokens: int) -> Job:
    return Job(api="openai", prompt=list(prompt), max_tokens=max_tokens, sampling=SamplingParams(), ignore_eos=True)


def record(sched, j: Job, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = next((r for r in list(sched.requests) if r["id"] == j.id), None)
        if rec is not None:
            return rec
        time.sleep(0.01)
    raise TimeoutError(f"request {j.id} did not end")


def test_a_request_cancelled_during_its_last_piece_samples_nothing(server):
    s, sched, spy = server
    j = job(PROMPT[:40], 50)              # one piece: alone, on main
    spy.victim = j
    sched.submit(j)
    rec = record(sched, j)
    assert rec["status"] == "cancelled"
    assert rec["output_tokens"] == 0      # before: 2 (the first token, then one decode step)
    assert spy.decoded == []


def test_a_generating_request_cancelled_during_anothers_piece_is_not_decoded(server):
    s, sched, spy = server
    talker = job(PROMPT[:30], 2000)
    sched.submit(talker)
    deadline = time.monotonic() + 60
    while not any(r.job is talker and r.phase == "decode" and len(r.generated) > 2 for r in list(sched._rows.values())):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    spy.not_ctx = next(r.ctx for r in list(sched._rows.values()) if r.job is talker)
    spy.victim = talker
    reader = job([p + 1 for p in PROMPT], 5)   # read in pieces beside the talker, each followed by a decode
    sched.submit(reader)
    rec = record(sched, talker)
    assert rec["status"] == "cancelled"
    assert spy.victim_generated_at_cancel is not None and spy.victim_generated_at_cancel > 2
    assert rec["output_tokens"] == spy.victim_generated_at_cancel    # before: one more, from the decode after
    assert record(sched, reader)["status"] == "ok"
