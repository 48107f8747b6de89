"""The engine on Q4_K_M- and Q5_K_M-shaped tiny models (Q4_K or Q5_K matrices, ffn_down and output in
Q6_K, as llama.cpp's _M files) takes the packed products of both types in an AVX-512 VNNI or AVX2 build: it
reports packed bytes of each (per 16 rows and super-block: Q4_K 2368, Q5_K 2880, Q6_K 3360), its
logits match the NumPy reference within test_logits_reference.py's K-quant tolerance (n_vocab 509: a
padded last group in the Q6_K `output`), and a batched decode is bit for bit the one-row decodes.
Elsewhere the first test is skipped and the others check the GGUF-layout products."""

from __future__ import annotations

import pytest
from strata.engine import Engine

from strata import _engine
from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

from .packed_engine_checks import check_batched_equals_single, check_logits_match_reference, packed_blocks

SHAPE = {**K_QUANT_SHAPE, "n_vocab": 509}
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 508, 64, 8]
TYPE_IDS = {"Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
BLOCK_BYTES = {"Q4_K": 2368, "Q5_K": 2880, "Q6_K": 3360}


@pytest.fixture(scope="module", params=["Q4_K", "Q5_K"])
def mix(request, tiny_model_factory):
    """(main type, model path): the main type everywhere but ffn_down and output (Q6_K)."""
    main = request.param
    seed = 11 if main == "Q4_K" else 13
    return main, tiny_model_factory(dtype=main, seed=seed, type_overrides={"ffn_down": "Q6_K", "output": "Q6_K"}, **SHAPE)


def test_both_types_are_packed(mix):
    main, model = mix
    if not all(_engine.kernels.packed_supported(TYPE_IDS[t]) for t in (main, "Q6_K")):
        pytest.skip(f"no packed {main} / Q6_K products in this build")
    engine = Engine(model, n_ctx=64, n_threads=2)
    n_embd, n_ff, n_vocab = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_vocab"]
    kv_dim = n_embd // SHAPE["n_head"] * SHAPE["n_head_kv"]
    main_layer = 2 * packed_blocks(n_embd, n_embd) + 2 * packed_blocks(kv_dim, n_embd) + 2 * packed_blocks(n_ff, n_embd)
    q6k = 2 * packed_blocks(n_embd, n_ff) + packed_blocks(n_vocab, n_embd)
    assert engine._native.packed_bytes == {main: BLOCK_BYTES[main] * 2 * main_layer, "Q6_K": BLOCK_BYTES["Q6_K"] * q6k}


def test_logits_match_reference(mix):
    check_logits_match_reference(mix[1], TOKENS, SHAPE["n_vocab"], 8e-2)


@pytest.mark.parametrize("n_threads", [1, 3])
def test_batched_equals_single(mix, n_threads):
    check_batched_equals_single(mix[1], [TOKENS[:5], TOKENS[2:11], TOKENS[4:6]], n_threads)
