"""The engine's products over packed (row-interleaved) weights on a tiny model whose row counts are
not multiples of 16 (kv_dim 24, n_vocab 509: padded last groups) with a tied Q8_0 output matrix:
logits against the NumPy reference within the quantized tolerance of test_logits_reference.py, and a
batched decode bit for bit equal to one-row decodes. Runs in every build (elsewhere it checks the
GGUF-layout products); the packed path is what an AVX-512 VNNI build takes."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.fixtures.reference import reference_logits

SHAPE = {"n_embd": 96, "n_head": 4, "n_head_kv": 1, "n_ff": 160, "n_vocab": 509}
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 508, 64, 8]


@pytest.fixture(scope="module")
def odd_model(tiny_model_factory):
    return tiny_model_factory(dtype="Q4_1", seed=5, tied_embeddings=True, type_overrides={"token_embd": "Q8_0"},
                              **SHAPE)


def test_odd_rows_match_reference(odd_model):
    ref = reference_logits(odd_model, TOKENS)
    engine = Engine(odd_model, n_ctx=64, n_threads=2)
    got = np.stack([engine.decode([0], [t])[0] for t in TOKENS])
    assert got.shape == ref.shape == (len(TOKENS), SHAPE["n_vocab"])
    scale = np.abs(ref).max(axis=1)
    err = np.abs(got - ref).max(axis=1)
    assert np.all(err <= 6e-2 * scale), (err / scale).max()
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.998


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_odd_rows_batched_equals_single(odd_model, n_threads):
    engine = Engine(odd_model, n_ctx=64, n_slots=3, n_threads=n_threads)
    prompts = [TOKENS[:5], TOKENS[2:9], TOKENS[4:6]]
    for c, p in enumerate(prompts, start=1):
        engine.prefill(c, p)
    batched = engine.decode([1, 2, 3], [11, 12, 13])
    for c, p in enumerate(prompts, start=1):
        engine.truncate(c, len(p))
    single = np.stack([engine.decode([c], [10 + c])[0] for c in (1, 2, 3)])
    assert np.array_equal(batched, single)
