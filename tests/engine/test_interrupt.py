"""Engine.interrupt: while on, every forward (one under way at its next layer) raises EngineInterrupted and adds
none of its tokens, so the contexts hold what they held (a server's stop calls it instead of waiting for the
prompt piece under way: tests/server/test_stop_interrupts_the_piece.py). Off again, the engine computes as if
nothing had happened: the KV the interrupted forward wrote past a context's history is never read."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from strata.engine import Engine, EngineError, EngineInterrupted

PROMPT = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47, 48]
PIECE = [9, 8, 7, 6, 5, 4, 3, 2, 200, 201, 202]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=128, n_slots=2, n_threads=2)


def test_an_interrupted_forward_adds_nothing_and_the_engine_goes_on_as_before(engine, tiny_model_factory):
    for ctx in range(engine.n_contexts):
        engine.truncate(ctx, 0)
    engine.prefill(0, PROMPT)
    engine.prefill(1, PROMPT[:5])
    engine.interrupt(True)
    try:
        assert engine.interrupted
        calls = {"prefill": lambda: engine.prefill(0, PIECE, chunk=4),        # several chunks: none kept
                 "decode": lambda: engine.decode([0, 1], [5, 6]),
                 "step": lambda: engine.step([(0, PIECE)], [1], [6])}
        for name, call in calls.items():
            with pytest.raises(EngineInterrupted, match="interrupted at layer 0") as caught:
                call()
            assert isinstance(caught.value, EngineError), name          # a ValueError like every engine error
            assert engine.context_tokens(0) == PROMPT and engine.context_tokens(1) == PROMPT[:5], name
    finally:
        engine.interrupt(False)
    assert not engine.interrupted
    engine.prefill(0, PIECE)
    got = engine.logits(0)
    fresh = Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=128, n_slots=2, n_threads=2)
    fresh.prefill(0, PROMPT + PIECE)
    assert np.array_equal(got, fresh.logits(0))                        # bit for bit a forward never interrupted


def test_the_interrupt_is_taken_from_another_thread_while_a_forward_runs(engine):
    """Set from another thread with no lock (the forward under way holds the engine's): the forward sees it at a
    layer boundary, or had ended already; either way the context holds a whole history, never part of one."""
    for ctx in range(engine.n_contexts):
        engine.truncate(ctx, 0)
    outcome: list = []

    def read() -> None:
        try:
            for _ in range(200):
                engine.prefill(0, PROMPT)
                engine.truncate(0, 0)
        except EngineInterrupted as e:
            outcome.append(e)
    reader = threading.Thread(target=read)
    reader.start()
    engine.interrupt(True)
    reader.join(60)
    engine.interrupt(False)
    assert len(engine.context_tokens(0)) in (0, len(PROMPT))
    assert outcome, "the reads went on past the interrupt"
