"""OpenAI's gpt-oss models (arch "gpt-oss"): the engine's logits against the fixtures' NumPy reference,
which computes each of the architecture's parts from their definition (tests/fixtures/reference.py):
Q/K/V/output biases, attention sinks, the sliding window of every other layer, the router's and
experts' biases and the clamped SwiGLU of the experts, with a head size whose heads do not make up
n_embd; and the errors of malformed gpt-oss metadata and tensors.

Not here: batching and chunking parity (test_bitwise.py runs its whole suite on a gpt-oss model
too); the Harmony chat format (tests/text, tests/server). Windows of 20 positions over prompts of 48
cross the 16-position tiles of the KV cache mid-tile, where the kernels must mask.
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.engine.test_moe import rewrite
from tests.fixtures.reference import ReferenceModel, reference_logits

LONG = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 3   # 48 positions


def oss_model(factory, dtype: str = "F32", **params):
    """A 3-layer gpt-oss model (layers 0 and 2 windowed), 64 wide, 4 heads of 32 over 2 KV heads."""
    defaults = {"arch": "gpt-oss", "n_layer": 3, "n_embd": 64, "n_head": 4, "n_head_kv": 2, "head_dim": 32,
                "n_ff": 64, "n_expert": 8, "n_expert_used": 2, "sliding_window": 20, "seed": 5}
    return factory(dtype=dtype, **(defaults | params))


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_gpt_oss_matches_reference(tiny_model_factory, kv_type):
    path = oss_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    assert engine.arch == "gpt-oss" and (engine.n_expert, engine.n_expert_used) == (8, 2)
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance("F32", kv_type))


def test_gpt_oss_with_q8_0_kv_matches_reference(tiny_model_factory):
    """q8_0 KV's 8-bit keys and values (2-3% of the logits here) would move router scores across each
    other, so every token runs all 4 experts: no choice to flip, the mixture's weights still vary."""
    path = oss_model(tiny_model_factory, n_expert=4, n_expert_used=4)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="q8_0")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), 6e-2)


@pytest.mark.parametrize("dtype", ["MXFP4", "Q8_0", "Q4_0"])
def test_quantized_gpt_oss_matches_reference(tiny_model_factory, dtype):
    """Quantized experts (MXFP4: what gpt-oss files hold) in one layer whose other matrices are F32
    (test_moe.py says why one layer)."""
    exact = {role: "F32" for role in ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output")}
    path = oss_model(tiny_model_factory, dtype, n_layer=1, type_overrides=exact, sliding_window=5)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance(dtype, "f32"))


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    """Prefill: the rows of one forward attend together (grouped kernels) with their own windows."""
    path = oss_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2)
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], reference_logits(path, LONG)[-1:], tolerance("F32", "f16"))


def test_the_window_and_the_sinks_change_the_answer(tiny_model_factory):
    """The checks above can fail: the reference without sinks, or with no window, is far from the
    engine; positions inside the window are the same whatever its size."""
    path = oss_model(tiny_model_factory)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    no_sinks = ReferenceModel(path)
    for name in [n for n in no_sinks.weights if n.endswith("attn_sinks.weight")]:
        no_sinks.weights[name] = np.full_like(no_sinks.weights[name], -np.inf)
    far = np.abs(got - no_sinks.logits(LONG)).max() / np.abs(got).max()
    assert far > 0.05

    wide = logits_every_position(Engine(oss_model(tiny_model_factory, sliding_window=64), n_ctx=64,
                                        n_threads=2, kv_type="f32"), LONG)
    assert np.array_equal(wide[:20], got[:20])             # a window of 20 hides nothing before position 20
    assert np.abs(wide[20:] - got[20:]).max() > 0.05 * np.abs(got).max()


def test_a_window_pattern_array_is_read(tiny_model_factory, tmp_path):
    """attention.sliding_window_pattern as one bool per layer (llama.cpp reads either form)."""
    path = oss_model(tiny_model_factory)
    every = tmp_path / "every.gguf"
    rewrite(path, every, kv={"gpt-oss.attention.sliding_window_pattern": [True, True, True]})
    period = tmp_path / "period0.gguf"
    rewrite(path, period, kv={"gpt-oss.attention.sliding_window_pattern": 0})   # 0: every layer
    a = logits_every_position(Engine(every, n_ctx=64, kv_type="f32"), LONG)
    b = logits_every_position(Engine(period, n_ctx=64, kv_type="f32"), LONG)
    assert np.array_equal(a, b)
    check_close(a, reference_logits(every, LONG), tolerance("F32", "f32"))
    default = logits_every_position(Engine(path, n_ctx=64, kv_type="f32"), LONG)
    assert not np.array_equal(a, default)


@pytest.mark.parametrize("change, message", [
    ({"drop": "blk.1.attn_sinks.weight"}, "missing tensor 'blk.1.attn_sinks.weight'"),
    ({"drop": "blk.0.ffn_down_exps.bias"}, "missing tensor 'blk.0.ffn_down_exps.bias'"),
    ({"kv": {"gpt-oss.attention.sliding_window": 0}}, "attention.sliding_window 0 must be positive"),
    ({"kv": {"gpt-oss.attention.sliding_window_pattern": [True, False]}}, "must be 3 bools"),
    ({"kv": {"gpt-oss.attention.sliding_window_pattern": -1}}, "sliding_window_pattern -1 is invalid"),
    ({"kv": {"gpt-oss.expert_count": 0}}, "gpt-oss without expert_count"),
])
def test_malformed_gpt_oss_files_are_refused_by_name(tiny_model_factory, tmp_path, change, message):
    bad = tmp_path / "bad.gguf"
    rewrite(oss_model(tiny_model_factory), bad, **change)
    with pytest.raises(ValueError, match=message):
        Engine(bad, n_ctx=32)


def test_the_swiglu_clamp_at_7_matches_reference(tiny_model_factory, tmp_path, monkeypatch):
    """Expert biases ~ N(0, 10) push gate above 7 and up beyond +-7, where gpt-oss's SwiGLU clamps
    (min(gate, 7), clamp(up, -7, 7)); the fixtures' biases of 0.1 never reach it. The reference without
    the clamp is far from the engine, so the match is the clamp's."""
    big = tmp_path / "big.gguf"
    rewrite(oss_model(tiny_model_factory, n_expert=4, n_expert_used=4), big,
              scale={"ffn_gate_exps.bias": 100.0, "ffn_up_exps.bias": 100.0})
    got = logits_every_position(Engine(big, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    check_close(got, reference_logits(big, LONG), tolerance("F32", "f32"))

    real_minimum, real_clip = np.minimum, np.clip     # the reference's clamp (np.minimum / np.clip at 7) undone
    monkeypatch.setattr(np, "minimum", lambda x, c: x if c == 7.0 else real_minimum(x, c))
    monkeypatch.setattr(np, "clip", lambda x, lo, hi: x if hi == 7.0 else real_clip(x, lo, hi))
    far = ReferenceModel(big).logits(LONG)
    assert np.abs(got - far).max() > 0.05 * np.abs(got).max()


@pytest.mark.parametrize("key, value, vtype, message", [
    # a pattern that is neither an integer nor bools: refused naming the key (was: "GGUF value is not
    # an integer", no key)
    ("gpt-oss.attention.sliding_window_pattern", "2", "STRING", "'gpt-oss.attention.sliding_window_pattern'"),
    ("gpt-oss.attention.sliding_window_pattern", 2.0, "FLOAT32", "'gpt-oss.attention.sliding_window_pattern'"),
    ("gpt-oss.rope.freq_base_swa", -1.0, "FLOAT32", "rope.freq_base_swa -1.000000 must be positive"),
])
def test_more_malformed_gpt_oss_metadata_is_refused_by_name(tiny_model_factory, tmp_path, key, value, vtype,
                                                            message):
    import gguf

    bad = tmp_path / "bad.gguf"
    rewrite(oss_model(tiny_model_factory), bad, kv={key: (value, gguf.GGUFValueType[vtype])})
    with pytest.raises(ValueError, match=message):
        Engine(bad, n_ctx=32)


def test_the_windowed_layers_turn_with_their_own_rope_base(tiny_model_factory, tmp_path):
    """llama.cpp turns the windowed layers with rope.freq_base_swa where the file has one (once refused
    here, when the engine had one RoPE for all layers)."""
    import gguf

    other = tmp_path / "other.gguf"
    rewrite(oss_model(tiny_model_factory), other, kv={"gpt-oss.rope.freq_base_swa": (500.0, gguf.GGUFValueType.FLOAT32)})
    got = logits_every_position(Engine(other, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    check_close(got, reference_logits(other, LONG), tolerance("F32", "f32"))
    plain = logits_every_position(Engine(oss_model(tiny_model_factory), n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    assert np.abs(got - plain).max() > 1e-3 * np.abs(got).max()


def test_a_windowed_rope_base_equal_to_the_base_is_read(tiny_model_factory, tmp_path):
    import gguf

    path = oss_model(tiny_model_factory)
    same = tmp_path / "same.gguf"
    rewrite(path, same, kv={"gpt-oss.rope.freq_base_swa": (10000.0, gguf.GGUFValueType.FLOAT32)})
    a = logits_every_position(Engine(same, n_ctx=64, kv_type="f32"), LONG[:20])
    assert np.array_equal(a, logits_every_position(Engine(path, n_ctx=64, kv_type="f32"), LONG[:20]))
