"""Two llama-family architectures with one difference each, against the fixtures' NumPy reference:
ByteDance's seed_oss (Seed-OSS-36B: Q/K/V biases, NEOX RoPE, the FFN norm named post_attention_norm) and
Hugging Face's smollm3 (SmolLM3-3B: every fourth layer without RoPE, llama.cpp's n_no_rope_layer_step).
Not here: batching parity (the forward is llama's; test_bitwise.py covers its paths)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.fixtures.reference import ReferenceModel, reference_logits

TOKENS = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 2


@pytest.mark.parametrize("arch", ["seed_oss", "smollm3"])
@pytest.mark.parametrize("dtype, kv_type", [("F32", "f32"), ("F32", "f16"), ("Q8_0", "f32")])
def test_matches_reference(tiny_model_factory, arch, dtype, kv_type):
    path = tiny_model_factory(arch=arch, dtype=dtype, n_layer=4, seed=31)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    assert engine.arch == arch
    check_close(logits_every_position(engine, TOKENS), reference_logits(path, TOKENS), tolerance(dtype, kv_type))


@pytest.mark.parametrize("arch", ["seed_oss", "smollm3"])
def test_the_difference_changes_the_answer(tiny_model_factory, arch):
    """The check above can fail: read as plain llama (NORM RoPE, no biases / every layer rotated), the
    reference is far from the engine."""
    path = tiny_model_factory(arch=arch, dtype="F32", n_layer=4, seed=31)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), TOKENS)
    ref = ReferenceModel(path)
    if arch == "seed_oss":
        for name in [n for n in ref.weights if n.endswith((".attn_q.bias", ".attn_k.bias", ".attn_v.bias"))]:
            ref.weights[name] = np.zeros_like(ref.weights[name])
    else:
        ref.config = dataclasses.replace(ref.config, arch="llama")
    assert np.abs(got - ref.logits(TOKENS)).max() > 1e-3 * np.abs(got).max()


def test_the_cuda_backend_refuses_smollm3_by_name(tiny_model_factory):
    from strata import _engine

    with pytest.raises(ValueError, match="smollm3 .layers without RoPE. runs on the CPU backend only"):
        _engine.Engine(str(tiny_model_factory(arch="smollm3", n_layer=4)), n_ctx=16, backend="cuda")
