"""Engine logits against the fixtures' NumPy reference (float64, dequantized weights) on tiny models.

Not here: bitwise parity between engine paths (test_bitwise.py) or the default model.

Tolerances, relative to the largest |logit| of the position (the reference's):
- F32 / F16 / BF16 weights with an f32 KV cache: 2e-5. The engine then computes in float32 from
  the same weight values (float activations, no quantization), so only float32 rounding over two
  layers separates it from float64.
- the same with the default f16 KV cache: 3e-3. K and V are rounded to fp16 (relative error
  2^-11 = 4.9e-4 per element) and attention sums such values over the context.
- quantized weights (Q8_0 .. Q6_K, MXFP4): the products take activations quantized to 8 bits per block
  (Q8_0 / Q8_1 / Q8_K, as llama.cpp does), an error of up to amax/254 per element that the
  reference does not make; measured 2-4% of the logit scale on these models, so 6% for the 32-block
  formats and 8% for the K-quants (256-blocks: one scale for more elements). A wrong block decode
  or a wrong row gives errors of the order of the logits themselves (> 30%).
  The cosine similarity of each row of logits with the reference must also exceed 0.998.
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.fixtures.reference import reference_logits
from tests.fixtures.tiny_gguf import ALL_TYPES, CPU_QUANT_TYPES, K_QUANT_SHAPE, K_QUANT_TYPES, MXFP4_TYPES

FLOAT_TYPES = ("F32", "F16", "BF16")
TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12]


def tolerance(dtype: str, kv_type: str) -> float:
    if dtype in FLOAT_TYPES:
        return 2e-5 if kv_type == "f32" else 3e-3
    return 8e-2 if dtype in K_QUANT_TYPES else 6e-2


def logits_every_position(engine: Engine, tokens: list[int]) -> np.ndarray:
    return np.stack([engine.decode([0], [t])[0] for t in tokens])


def check_close(got: np.ndarray, ref: np.ndarray, rel: float) -> None:
    scale = np.abs(ref).max(axis=1)
    err = np.abs(got - ref).max(axis=1)
    worst = int(np.argmax(err / scale))
    assert np.all(err <= rel * scale), f"position {worst}: error {err[worst]:.3g} > {rel} x {scale[worst]:.3g}"
    cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() > 0.998, f"cosine similarity {cos.min():.5f}"


@pytest.mark.parametrize("dtype", ALL_TYPES + MXFP4_TYPES + CPU_QUANT_TYPES)   # MXFP4: measured 2.4% (dense, as gpt-oss's experts)
def test_every_type_matches_reference(tiny_model_factory, dtype):
    shape = K_QUANT_SHAPE if dtype in K_QUANT_TYPES or dtype in ("Q2_K", "Q3_K", "IQ4_XS") else {}
    path = tiny_model_factory(dtype=dtype, seed=3, **shape)
    ref = reference_logits(path, TOKENS)
    kv_types = ("f32", "f16") if dtype in FLOAT_TYPES else ("f16",)
    for kv in kv_types:
        engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv)
        check_close(logits_every_position(engine, TOKENS), ref, tolerance(dtype, kv))


@pytest.mark.parametrize(
    "params",
    [
        {"tied_embeddings": True},                       # no output.weight: token_embd is the output
        {"n_head": 4, "n_head_kv": 4},                   # plain multi-head attention
        {"n_head": 8, "n_head_kv": 1, "n_embd": 128},    # one KV head for all
        {"n_layer": 3, "rope_freq_base": 100000.0, "rms_eps": 1e-6},
        {"n_embd": 72, "n_head": 4, "n_head_kv": 2},      # head size 18: the KV rows layout
        {"rope_scaling": ("linear", 4.0, 64)},
        {"rope_scaling": ("yarn", 4.0, 64)},             # the ramp blends dimension pairs 0-3 of 8
        {"rope_scaling": ("yarn", 8.0, 16), "n_embd": 128, "n_head": 4},   # head size 32, other corr dims
        {"rope_scaling": ("yarn", 4.0, 64), "n_rot": 8},                  # 8 of 16 dims rotated
        # as llama.cpp reads them: rope.scaling.attn_factor scales cos / sin with any type, no type is
        # linear, an original context of 0 is the training one, a factor <= 1 scales no magnitude
        {"rope_scaling": ("yarn", 4.0, 64), "rope_keys": {"rope.scaling.attn_factor": 0.8}},
        {"rope_scaling": ("linear", 4.0, 64), "rope_keys": {"rope.scaling.attn_factor": 1.25}},
        {"rope_scaling": (None, 4.0, 64)},
        {"rope_scaling": ("yarn", 4.0, 0), "ctx_len": 48},
        {"rope_scaling": ("yarn", 0.5, 64)},
    ],
)
def test_shapes_and_options_match_reference(tiny_model_factory, params):
    path = tiny_model_factory(dtype="F32", seed=5, **params)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), 2e-5)


def test_mixed_types_like_k_quant_m_files(tiny_model_factory):
    path = tiny_model_factory(dtype="Q4_K", seed=7, type_overrides={"output": "Q6_K", "token_embd": "Q8_0",
                                                                    "attn_v": "Q5_K", "ffn_down": "Q6_K"},
                              **K_QUANT_SHAPE)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="q8_0")
    # q8_0 KV adds a second 8-bit rounding (of K and V) to the activations' one
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), 1e-1)


def test_prefill_logits_are_the_last_position(tiny_model_factory):
    path = tiny_model_factory(dtype="F16", seed=3)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    engine.prefill(0, TOKENS, chunk=5)
    ref = reference_logits(path, TOKENS)[-1:]
    check_close(engine.logits(0)[None, :], ref, 2e-5)


@pytest.mark.parametrize("scaling, keys, message", [
    (("longrope", 4.0, 64), None, "unsupported rope scaling 'longrope' (supported: linear, yarn)"),
    (("yarn", 4.0, 64), {"rope.scaling.attn_factor": 0.0}, "rope.scaling.attn_factor 0.000000 must be positive"),
])
def test_rope_scaling_the_engine_cannot_do_is_refused_by_name(tiny_model_factory, scaling, keys, message):
    path = tiny_model_factory(dtype="F32", seed=5, rope_scaling=scaling, rope_keys=keys)
    with pytest.raises(ValueError) as err:
        Engine(path, n_ctx=16)
    assert message in str(err.value)


def test_yarn_keys_llama_cpp_does_not_read_for_llama_change_nothing(tiny_model_factory):
    # llama.cpp reads rope.scaling.yarn_* for a few other architectures only; a converter may write
    # them (attention_factor, beta_fast, ...) into llama / qwen files: the logits stay llama.cpp's
    plain = tiny_model_factory(dtype="F32", seed=5, rope_scaling=("yarn", 4.0, 64))
    keyed = tiny_model_factory(dtype="F32", seed=5, rope_scaling=("yarn", 4.0, 64), rope_keys={
        "rope.scaling.yarn_attn_factor": 1.1386, "rope.scaling.yarn_beta_fast": 16.0,
        "rope.scaling.yarn_beta_slow": 2.0, "rope.scaling.yarn_ext_factor": 0.5})
    a = logits_every_position(Engine(plain, n_ctx=64, n_threads=2, kv_type="f32"), TOKENS)
    b = logits_every_position(Engine(keyed, n_ctx=64, n_threads=2, kv_type="f32"), TOKENS)
    np.testing.assert_array_equal(a, b)
