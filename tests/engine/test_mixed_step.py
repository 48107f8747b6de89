"""Engine.step: prompt pieces of several contexts and decode rows of others in one forward (the
continuous agenda's mixed step) give bit for bit what separate prefills and a decode give.

Not here: the scheduler's use of it (tests/server).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

PROMPT = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47, 48]
SECOND = [9, 8, 7, 6, 5, 4, 3, 2]
OTHERS = {3: [5, 6, 7, 8, 9], 4: [300, 301, 302]}


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=128, n_slots=4, n_threads=2)


def reset(engine: Engine) -> None:
    for ctx in range(engine.n_contexts):
        engine.truncate(ctx, 0)
    for ctx, toks in OTHERS.items():
        engine.prefill(ctx, toks)


def test_mixed_step_equals_prefills_then_decode(engine):
    reset(engine)
    engine.prefill(1, PROMPT[:8])
    engine.prefill(1, PROMPT[8:])
    engine.prefill(2, SECOND)
    want_first, want_second = engine.logits(1), engine.logits(2)
    want_rows = engine.decode([3, 4], [11, 12])

    reset(engine)
    engine.prefill(1, PROMPT[:8])
    rows = engine.step([(1, PROMPT[8:]), (2, SECOND)], [3, 4], [11, 12])
    assert np.array_equal(rows, want_rows)
    assert np.array_equal(engine.logits(1), want_first)
    assert np.array_equal(engine.logits(2), want_second)
    assert engine.context_tokens(1) == PROMPT
    assert engine.context_tokens(2) == SECOND
    assert engine.context_tokens(3) == OTHERS[3] + [11]


def test_step_without_prompt_pieces_is_a_decode(engine):
    reset(engine)
    want = engine.decode([3, 4], [11, 12])
    reset(engine)
    assert np.array_equal(engine.step([], [3, 4], [11, 12]), want)


def test_step_refuses_bad_batches_and_applies_nothing(engine):
    reset(engine)
    with pytest.raises(Exception, match="appears twice"):
        engine.step([(3, [1, 2])], [3], [3])
    with pytest.raises(Exception, match="appears twice"):
        engine.step([(1, [1]), (1, [2])], [], [])
    with pytest.raises(Exception, match="batch limit"):
        engine.step([(1, [1] * engine.max_rows)], [3], [3])
    with pytest.raises(Exception, match="capacity"):
        engine.step([(1, [1] * 129)], [], [])
    with pytest.raises(Exception, match="empty prompt piece"):
        engine.step([(1, [])], [3], [3])
    assert engine.context_tokens(3) == OTHERS[3]
    assert engine.context_len(1) == 0
