"""The engine's products over packed (row-interleaved) weights on a tiny model whose row counts are
not multiples of 16 (kv_dim 24, n_vocab 509: padded last groups) with a tied Q8_0 output matrix:
logits against the NumPy reference within the quantized tolerance of test_logits_reference.py, and a
batched decode bit for bit equal to one-row decodes. Runs in every build (elsewhere it checks the
GGUF-layout products); the packed path is what an AVX-512 VNNI build takes."""

from __future__ import annotations

import pytest

from tests.engine.packed_engine_checks import check_batched_equals_single, check_logits_match_reference

SHAPE = {"n_embd": 96, "n_head": 4, "n_head_kv": 1, "n_ff": 160, "n_vocab": 509}
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 508, 64, 8]


@pytest.fixture(scope="module")
def odd_model(tiny_model_factory):
    return tiny_model_factory(dtype="Q4_1", seed=5, tied_embeddings=True, type_overrides={"token_embd": "Q8_0"},
                              **SHAPE)


def test_odd_rows_match_reference(odd_model):
    check_logits_match_reference(odd_model, TOKENS, SHAPE["n_vocab"], 6e-2)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_odd_rows_batched_equals_single(odd_model, n_threads):
    check_batched_equals_single(odd_model, [TOKENS[:5], TOKENS[2:9], TOKENS[4:6]], n_threads)
