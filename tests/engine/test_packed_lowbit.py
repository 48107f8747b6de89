"""The engine on tiny models of the types packed for prefill since session 15 (Q3_K; Q3_K_M's mix of Q3_K,
Q5_K and Q6_K; IQ4_XS, alone and with an IQ4_XS file's Q6_K output; IQ4_NL; Q2_K, alone and in a Q2_K
file's mix with Q3_K and Q6_K) takes the packed products in an AVX-512 VNNI build: it reports the packed
bytes of each type (per 16 rows and block: Q3_K 1824, Q2_K 1344, IQ4_XS 2208, Q5_K 2880, Q6_K 3360, IQ4_NL
288 per 32 columns), its logits match the NumPy reference
within test_logits_reference.py's tolerance for these types (6%; measured at most 3.3%) with the packed
copies and without them (n_vocab 509: a padded last group in `output`), and a batched decode is bit for bit the one-row decodes. Elsewhere
the first test is skipped and the others check the GGUF-layout products."""

from __future__ import annotations

import pytest
from strata.engine import Engine

from strata import _engine
from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

from .packed_engine_checks import check_batched_equals_single, check_logits_match_reference

SHAPE = {**K_QUANT_SHAPE, "n_vocab": 509}
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 508, 64, 8]
TYPE_IDS = {"Q2_K": 10, "Q3_K": 11, "Q5_K": 13, "Q6_K": 14, "IQ4_XS": 23, "IQ4_NL": 20}
BLOCK_BYTES = {"Q2_K": 1344, "Q3_K": 1824, "Q5_K": 2880, "Q6_K": 3360, "IQ4_XS": 2208, "IQ4_NL": 288}   # 16 rows x a block
BLOCK_ELEMS = {"Q2_K": 256, "Q3_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256, "IQ4_NL": 32}
# model name: (main type, overrides as llama.cpp's file type writes them)
MODELS = {
    "Q3_K": ("Q3_K", {}),
    "Q3_K_M": ("Q3_K", {"attn_v": "Q5_K", "ffn_down": "Q5_K", "output": "Q6_K"}),
    "IQ4_XS": ("IQ4_XS", {}),
    "IQ4_XS file": ("IQ4_XS", {"output": "Q6_K", "token_embd": "Q4_K"}),
    "IQ4_NL": ("IQ4_NL", {}),
    "Q2_K": ("Q2_K", {}),
    "Q2_K file": ("Q2_K", {"attn_v": "Q3_K", "ffn_down": "Q3_K", "output": "Q6_K"}),
}
ROLES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tiny_model_factory):
    """(model name, path)."""
    main, overrides = MODELS[request.param]
    return request.param, tiny_model_factory(dtype=main, seed=17, type_overrides=overrides, **SHAPE)


def expected_packed_bytes(name: str) -> dict[str, int]:
    """{type: packed bytes} of a model's product matrices (two layers and `output`)."""
    main, overrides = MODELS[name]
    n_embd, n_ff, n_vocab = SHAPE["n_embd"], SHAPE["n_ff"], SHAPE["n_vocab"]
    kv_dim = n_embd // SHAPE["n_head"] * SHAPE["n_head_kv"]
    shapes = {"attn_q": (n_embd, n_embd), "attn_k": (kv_dim, n_embd), "attn_v": (kv_dim, n_embd),
              "attn_output": (n_embd, n_embd), "ffn_gate": (n_ff, n_embd), "ffn_up": (n_ff, n_embd),
              "ffn_down": (n_embd, n_ff)}
    out: dict[str, int] = {}
    for role, (rows, cols), n in [*[(r, shapes[r], 2) for r in ROLES], ("output", (n_vocab, n_embd), 1)]:
        t = overrides.get(role, main)
        out[t] = out.get(t, 0) + n * -(-rows // 16) * (cols // BLOCK_ELEMS[t]) * BLOCK_BYTES[t]
    return out


def test_weights_are_packed(model):
    name, path = model
    want = expected_packed_bytes(name)
    if not all(_engine.kernels.packed_supported(TYPE_IDS[t]) for t in want):
        pytest.skip(f"no packed {', '.join(want)} products in this build")
    assert Engine(path, n_ctx=64, n_threads=2)._native.packed_bytes == want


@pytest.mark.parametrize("pack_weights", [True, False])
def test_logits_match_reference(model, pack_weights):
    check_logits_match_reference(model[1], TOKENS, SHAPE["n_vocab"], 6e-2, pack_weights=pack_weights)


@pytest.mark.parametrize("n_threads", [1, 3])
def test_batched_equals_single(model, n_threads):
    check_batched_equals_single(model[1], [TOKENS[:5], TOKENS[2:11], TOKENS[4:6]], n_threads)
