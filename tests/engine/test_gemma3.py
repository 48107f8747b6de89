"""Google's gemma3 architecture (Gemma 3 1B / 4B / 12B / 27B): the engine's logits against the fixtures'
NumPy reference (tests/fixtures/reference.py), which computes the architecture's parts from their
definition: scaled embeddings, per-head Q/K norms, the attention's and the FFN's outputs normed before
their residual adds, GeGLU, windowed layers with their own unscaled RoPE base beside global layers with
the file's linear scaling, the query scale, and the optional final logit cap; and malformed metadata.

Not here: batching and chunking parity (test_bitwise.py runs its suite on a gemma3 model too); Gemma's
chat template and tokenizer (tests/text).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.fixtures.reference import ReferenceModel, reference_logits

LONG = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 3   # 48 positions


def gemma_model(factory, dtype: str = "F32", **params):
    """A 3-layer gemma3 model (layers 0 and 2 windowed to 20 positions: pattern 2), 64 wide, 4 heads of 32
    over 2 KV heads, global layers with linear RoPE x4 at base 1e6, windowed ones at 10000 unscaled."""
    defaults = {"arch": "gemma3", "n_layer": 3, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
                "sliding_window": 20, "swa_pattern": 2, "rope_freq_base": 1e6,
                "rope_scaling": ("linear", 4.0, 64), "seed": 21}
    return factory(dtype=dtype, **(defaults | params))


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_gemma3_matches_reference(tiny_model_factory, kv_type):
    path = gemma_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    assert engine.arch == "gemma3"
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance("F32", kv_type))


@pytest.mark.parametrize("params", [
    {"rope_keys": {"final_logit_softcapping": 3.0}},                 # the cap bites: logits reach ~10
    {"rope_keys": {"rope.freq_base_swa": 500.0}},                    # the file's windowed base
    {"sliding_window": 0, "swa_pattern": None},                      # no window: one RoPE for all
    {"swa_pattern": None, "n_layer": 7},                             # the default period: layer 5 global
    {"rope_scaling": None},                                          # no scaling: only the bases differ
], ids=["softcap", "swa-base", "no-window", "period-6", "unscaled"])
def test_gemma3_options_match_reference(tiny_model_factory, params):
    path = gemma_model(tiny_model_factory, **params)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), 2e-5)


@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_K"])
def test_quantized_gemma3_matches_reference(tiny_model_factory, dtype):
    from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

    shape = {**K_QUANT_SHAPE, "head_dim": None} if dtype == "Q4_K" else {}
    path = gemma_model(tiny_model_factory, dtype, **shape)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance(dtype, "f32"))


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    path = gemma_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], reference_logits(path, LONG)[-1:], 2e-5)


@pytest.mark.parametrize("change", ["silu", "no-post-norms", "one-rope", "no-embd-scale", "27b-scale", "no-window"])
def test_each_part_changes_the_answer(tiny_model_factory, change, monkeypatch):
    """The checks above can fail: a reference without any one part is far from the engine."""
    path = gemma_model(tiny_model_factory)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    ref = ReferenceModel(path)
    if change == "silu":
        monkeypatch.setattr(ReferenceModel, "_gelu", staticmethod(ReferenceModel._silu))
    elif change == "no-post-norms":
        post = [w for n, w in ref.weights.items() if "post_attention_norm" in n or "post_ffw_norm" in n]
        real = ReferenceModel._rms_norm
        monkeypatch.setattr(ReferenceModel, "_rms_norm",
                            lambda self, x, w: x if any(w is p for p in post) else real(self, x, w))
    elif change == "one-rope":
        ref.config = dataclasses.replace(ref.config, rope_freq_base_swa=0.0, rope_swa_unscaled=False)
    elif change == "no-embd-scale":   # the input embedding only: the output matrix is its own
        ref.weights["token_embd.weight"] = ref.weights["token_embd.weight"] / np.sqrt(ref.config.n_embd)
    elif change == "27b-scale":       # 1 / sqrt(n_embd / n_head) = 1 / 4 instead of 1 / sqrt(32)
        ref.config = dataclasses.replace(ref.config, attn_scale=0.25)
    else:
        ref.config = dataclasses.replace(ref.config, sliding_window=0)
    assert np.abs(got - ref.logits(LONG)).max() > 1e-3 * np.abs(got).max()


@pytest.mark.parametrize("n_layer, pattern", [(3, None), (6, 8)])
def test_a_period_longer_than_the_model_windows_every_layer(tiny_model_factory, n_layer, pattern):
    """llama.cpp takes any period n (layer il windowed when il % n < n - 1): a gemma3 file of fewer layers
    than the default period 6 (or with a longer one) has every layer windowed; it was refused ('...
    sliding_window_pattern 6 is invalid', naming a key the file does not hold)."""
    path = gemma_model(tiny_model_factory, n_layer=n_layer, swa_pattern=pattern)
    ref = ReferenceModel(path)
    assert all(ref.config.windowed)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    check_close(got, ref.logits(LONG), 2e-5)


def test_the_27b_query_scale_matches_reference(tiny_model_factory):
    """Gemma 3 27B (62 layers) scales queries by 1 / sqrt(n_embd / n_head), not 1 / sqrt(head_dim), as
    llama.cpp does: a 62-layer model whose heads (32) are wider than n_embd / n_head (16) runs with 1 / 4,
    and the head-size scale is far from it."""
    path = gemma_model(tiny_model_factory, n_layer=62, swa_pattern=None)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG[:24])
    ref = ReferenceModel(path)
    assert ref.config.attn_scale == 0.25
    check_close(got, ref.logits(LONG[:24]), 2e-5)
    ref.config = dataclasses.replace(ref.config, attn_scale=1.0 / np.sqrt(32))
    assert np.abs(got - ref.logits(LONG[:24])).max() > 1e-3 * np.abs(got).max()


@pytest.mark.parametrize("key, value, vtype, message", [
    ("gemma3.attention.sliding_window", -4, "INT32", "attention.sliding_window -4 is negative"),
    ("gemma3.final_logit_softcapping", -1.0, "FLOAT32", "final_logit_softcapping -1.000000 is invalid"),
    ("gemma3.rope.freq_base_swa", 0.0, "FLOAT32", "rope.freq_base_swa 0.000000 must be positive"),
])
def test_malformed_gemma3_metadata_is_refused_by_name(tiny_model_factory, tmp_path, key, value, vtype, message):
    import gguf

    from tests.engine.test_moe import rewrite

    bad = tmp_path / "bad.gguf"
    rewrite(gemma_model(tiny_model_factory), bad, kv={key: (value, gguf.GGUFValueType[vtype])})
    with pytest.raises(ValueError, match=message):
        Engine(bad, n_ctx=16)


def test_the_cuda_backend_refuses_gemma3_and_auto_keeps_it_on_the_cpu(tiny_model_factory):
    from strata.engine import GGUFFile

    from strata import _engine
    from strata.model_shape import cpu_only

    path = gemma_model(tiny_model_factory)
    with pytest.raises(ValueError, match="gemma3 .*runs on the CPU backend only"):
        _engine.Engine(str(path), n_ctx=16, backend="cuda")
    assert cpu_only(GGUFFile(str(path)).metadata)
