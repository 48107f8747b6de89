"""The engine on a Q4_K tiny model takes the packed (row-interleaved) Q4_K products in an AVX-512
VNNI build: it reports packed Q4_K bytes (one 2368-byte block per 16 rows and super-block), its
logits match the NumPy reference within test_logits_reference.py's K-quant tolerance (n_vocab 509:
a padded last group in `output`), and a batched decode is bit for bit the one-row decodes.
Elsewhere the first test is skipped and the others check the GGUF-layout products."""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from strata import _engine
from tests.fixtures.reference import reference_logits
from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

SHAPE = {**K_QUANT_SHAPE, "n_vocab": 509}
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 508, 64, 8]
Q4_K = 12


@pytest.fixture(scope="module")
def q4k_model(tiny_model_factory):
    return tiny_model_factory(dtype="Q4_K", seed=9, **SHAPE)


@pytest.mark.skipif(not _engine.kernels.packed_supported(Q4_K), reason="no packed Q4_K products in this build")
def test_q4k_weights_are_packed(q4k_model):
    engine = Engine(q4k_model, n_ctx=64, n_threads=2)
    n_embd, n_ff, n_vocab = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_vocab"]
    kv_dim = n_embd // SHAPE["n_head"] * SHAPE["n_head_kv"]
    blocks = lambda rows, cols: -(-rows // 16) * (cols // 256)   # noqa: E731
    per_layer = 2 * blocks(n_embd, n_embd) + 2 * blocks(kv_dim, n_embd) + 2 * blocks(n_ff, n_embd) + blocks(n_embd, n_ff)
    want = 2368 * (2 * per_layer + blocks(n_vocab, n_embd))
    assert engine._native.packed_bytes == {"Q4_K": want}


def test_q4k_logits_match_reference(q4k_model):
    ref = reference_logits(q4k_model, TOKENS)
    engine = Engine(q4k_model, n_ctx=64, n_threads=2)
    got = np.stack([engine.decode([0], [t])[0] for t in TOKENS])
    assert got.shape == ref.shape == (len(TOKENS), SHAPE["n_vocab"])
    scale = np.abs(ref).max(axis=1)
    err = np.abs(got - ref).max(axis=1)
    assert np.all(err <= 8e-2 * scale), (err / scale).max()
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.998


@pytest.mark.parametrize("n_threads", [1, 3])
def test_q4k_batched_equals_single(q4k_model, n_threads):
    engine = Engine(q4k_model, n_ctx=64, n_slots=3, n_threads=n_threads)
    prompts = [TOKENS[:5], TOKENS[2:11], TOKENS[4:6]]
    for c, p in enumerate(prompts, start=1):
        engine.prefill(c, p)
    batched = engine.decode([1, 2, 3], [11, 12, 13])
    for c, p in enumerate(prompts, start=1):
        engine.truncate(c, len(p))
    single = np.stack([engine.decode([c], [10 + c])[0] for c in (1, 2, 3)])
    assert np.array_equal(batched, single)
