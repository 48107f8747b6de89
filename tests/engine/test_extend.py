"""Engine.extend: tokens fed to one or more contexts in one forward with the logits after EVERY token
(lookup decoding's draft check) are bit for bit what feeding them one decode at a time gives, and a
truncate after it leaves the context as if the rejected tokens had never been fed.

Not here: the scheduler's use of it (tests/server/test_lookup_decoding.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

HISTORY = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8]
DRAFT = [9, 300, 12, 44, 45]
OTHER = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def engine(tiny_model_factory):
    return Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=128, n_slots=2, n_threads=2)


def reset(engine: Engine) -> None:
    for ctx in range(engine.n_contexts):
        engine.truncate(ctx, 0)
    engine.prefill(1, HISTORY)
    engine.prefill(2, OTHER)


def one_by_one(engine: Engine, ctx: int, tokens: list[int]) -> np.ndarray:
    return np.stack([engine.decode([ctx], [t])[0] for t in tokens])


def test_extend_gives_every_tokens_logits_as_decodes_do(engine):
    reset(engine)
    want = one_by_one(engine, 1, DRAFT)
    reset(engine)
    got = engine.extend([(1, DRAFT)])
    assert got.shape == (len(DRAFT), engine.n_vocab)
    assert np.array_equal(got, want)
    assert engine.context_tokens(1) == HISTORY + DRAFT
    assert np.array_equal(engine.logits(1), want[-1])   # the context keeps its last row's logits


def test_extend_of_two_contexts_in_one_forward(engine):
    reset(engine)
    want1, want2 = one_by_one(engine, 1, DRAFT), one_by_one(engine, 2, [11, 12])
    reset(engine)
    got = engine.extend([(1, DRAFT), (2, [11, 12])])
    assert np.array_equal(got[: len(DRAFT)], want1)
    assert np.array_equal(got[len(DRAFT):], want2)


def test_truncating_the_rejected_tail_then_decoding_equals_never_having_fed_it(engine):
    reset(engine)
    want = one_by_one(engine, 1, DRAFT[:2] + [77, 78])
    reset(engine)
    engine.extend([(1, DRAFT)])
    engine.truncate(1, len(HISTORY) + 2)   # two accepted, the rest rejected
    got = one_by_one(engine, 1, [77, 78])
    assert np.array_equal(got, want[2:])
    assert engine.context_tokens(1) == HISTORY + DRAFT[:2] + [77, 78]


def test_extend_refuses_bad_input_and_applies_nothing(engine):
    reset(engine)
    too_many = [1] * (engine.max_logit_rows + 1)
    with pytest.raises(Exception, match="rows with logits"):
        engine.extend([(1, too_many)])
    with pytest.raises(Exception, match="empty prompt piece"):
        engine.extend([(1, [])])
    with pytest.raises(Exception, match="appears twice"):
        engine.extend([(1, [1]), (1, [2])])
    with pytest.raises(Exception, match="outside the vocabulary"):
        engine.extend([(1, [engine.n_vocab])])
    assert engine.context_tokens(1) == HISTORY
    assert engine.max_logit_rows >= 32
    engine.prefill(1, [1] * (engine.context_capacity(1) - len(HISTORY) - 2))
    with pytest.raises(Exception, match="capacity"):
        engine.extend([(1, [1, 2, 3])])
    assert len(engine.context_tokens(1)) == engine.context_capacity(1) - 2


def test_the_logit_row_limit_never_exceeds_a_small_forward_limit(tiny_model_factory):
    """With max_chunk (--prefill-chunk) 4 and 3 contexts one forward takes 4 rows, so extend's limit is 4
    too (not 32), and a call above it is refused with that limit named, before anything is allocated or
    applied; every context still decodes in one batch."""
    small = Engine(tiny_model_factory(dtype="Q4_1", seed=5), n_ctx=64, n_slots=2, n_threads=1, max_chunk=4)
    assert small.max_rows == 4 and small.max_logit_rows == 4
    small.prefill(1, HISTORY)
    with pytest.raises(Exception, match="5 tokens exceed the limit of 4 rows with logits"):
        small.extend([(1, DRAFT)])
    assert small.context_tokens(1) == HISTORY
    assert small.extend([(1, DRAFT[:4])]).shape == (4, small.n_vocab)
    small.prefill(0, [1, 2])
    small.prefill(2, [3])
    assert small.decode([0, 1, 2], [5, 6, 7]).shape == (3, small.n_vocab)
