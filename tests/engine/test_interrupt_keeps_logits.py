"""Engine.interrupt leaves each context as it was before the interrupted call, its logits included: a context whose
last position was computed (it has logits) still has them, the same floats, after a prefill, decode, step or extend
given up at a layer boundary (the forward writes a row's logits only after its last layer, so they are intact).
Before, every context the call touched lost them (has_logits false: `logits` raised 'has no logits') though it held
the same tokens: not the state before the call that docs/internals.md promises."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine, EngineInterrupted

PROMPT = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47, 48]
PIECE = [9, 8, 7, 6, 5, 4, 3, 2, 200, 201, 202]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=128, n_slots=2, n_threads=2)


@pytest.mark.parametrize("call", ["prefill", "decode", "step", "extend"])
def test_an_interrupted_call_keeps_each_contexts_logits(engine, call):
    for ctx in range(engine.n_contexts):
        engine.truncate(ctx, 0)
    engine.prefill(0, PROMPT)
    engine.prefill(1, PROMPT[:5])
    before = {ctx: engine.logits(ctx).copy() for ctx in (0, 1)}
    calls = {"prefill": lambda: engine.prefill(0, PIECE, chunk=4),
             "decode": lambda: engine.decode([0, 1], [5, 6]),
             "step": lambda: engine.step([(0, PIECE)], [1], [6]),
             "extend": lambda: engine.extend([(0, PIECE[:3]), (1, [6])])}
    engine.interrupt(True)
    try:
        with pytest.raises(EngineInterrupted):
            calls[call]()
    finally:
        engine.interrupt(False)
    for ctx, held in ((0, PROMPT), (1, PROMPT[:5])):
        assert engine.context_tokens(ctx) == held, (call, ctx)
        assert engine.has_logits(ctx), (call, ctx)
        assert np.array_equal(engine.logits(ctx), before[ctx]), (call, ctx)
