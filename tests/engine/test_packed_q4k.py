"""The engine on a Q4_K tiny model takes the packed (row-interleaved) Q4_K products in an AVX-512
VNNI or AVX2 build: it reports packed Q4_K bytes (one 2368-byte block per 16 rows and super-block), its
logits match the NumPy reference within test_logits_reference.py's K-quant tolerance (n_vocab 509:
a padded last group in `output`), and a batched decode is bit for bit the one-row decodes.
Elsewhere the first test is skipped and the others check the GGUF-layout products."""

from __future__ import annotations

import pytest
from strata.engine import Engine

from strata import _engine
from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

from .packed_engine_checks import check_batched_equals_single, check_logits_match_reference, packed_blocks

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
    blocks = packed_blocks
    per_layer = 2 * blocks(n_embd, n_embd) + 2 * blocks(kv_dim, n_embd) + 2 * blocks(n_ff, n_embd) + blocks(n_embd, n_ff)
    want = 2368 * (2 * per_layer + blocks(n_vocab, n_embd))
    assert engine._native.packed_bytes == {"Q4_K": want}


def test_q4k_logits_match_reference(q4k_model):
    check_logits_match_reference(q4k_model, TOKENS, SHAPE["n_vocab"], 8e-2)


@pytest.mark.parametrize("n_threads", [1, 3])
def test_q4k_batched_equals_single(q4k_model, n_threads):
    check_batched_equals_single(q4k_model, [TOKENS[:5], TOKENS[2:11], TOKENS[4:6]], n_threads)
