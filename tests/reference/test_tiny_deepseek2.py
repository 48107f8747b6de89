"""The tiny deepseek2 files (make_tiny_gguf arch="deepseek2") laid out as llama.cpp's loader reads an MLA
conversion, and the NumPy reference's deepseek2 parts that need no engine: its incremental state, the gating
default rule, the scores' scale.

Not here: the engine (tests/engine/test_deepseek2.py) or llama.cpp (benchmarks/generated_vs_llamacpp.py
--only deepseek2 --against reference: the reference agrees with it to 1.5e-6 of the logit scale).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from tests.fixtures.reference import KVState, ReferenceModel
from tests.fixtures.reference_mla import GLM_47_FLASH_VOCAB, deepseek2_fields
from tests.fixtures.tiny_gguf import make_tiny_gguf

DS2 = {"arch": "deepseek2", "n_layer": 2, "n_ff": 32, "n_expert": 4, "n_expert_used": 2}


def tensors_and_keys(path) -> tuple[dict[str, list[int]], dict]:
    """{name: GGUF dims (ne order)}, {key: value} of a file."""
    r = gguf.GGUFReader(path)
    keys = {f.name: f.contents() for f in r.fields.values() if not f.name.startswith(("GGUF.", "tokenizer."))}
    return {t.name: [int(d) for d in t.shape] for t in r.tensors}, keys


@pytest.mark.parametrize("q_lora_rank", [0, 32])
def test_the_layout_is_llama_cpps_mla_conversion(tmp_path, q_lora_rank):
    """The GGUF dims llama.cpp's deepseek2 loader asks for (src/models/deepseek2.cpp), 4 heads of keys
    16 + 8 and values 24 over a latent of 32."""
    path = make_tiny_gguf(tmp_path / "m.gguf", **DS2, mla={"q_lora_rank": q_lora_rank, "vh": 24})
    dims, keys = tensors_and_keys(path)
    a = "deepseek2.attention."
    assert (keys[a + "head_count"], keys[a + "head_count_kv"], keys[a + "kv_lora_rank"]) == (4, 1, 32)
    assert (keys[a + "key_length"], keys[a + "value_length"]) == (32 + 8, 32)           # the one latent head
    assert (keys[a + "key_length_mla"], keys[a + "value_length_mla"]) == (16 + 8, 24)   # per head, decompressed
    assert keys[a + "q_lora_rank"] == q_lora_rank and keys["deepseek2.rope.dimension_count"] == 8
    assert (keys["deepseek2.block_count"], keys["deepseek2.nextn_predict_layers"]) == (3, 1)
    p = "blk.1."
    if q_lora_rank:
        assert (dims[p + "attn_q_a.weight"], dims[p + "attn_q_a_norm.weight"]) == ([64, 32], [32])
        assert dims[p + "attn_q_b.weight"] == [32, 4 * 24] and p + "attn_q.weight" not in dims
    else:
        assert dims[p + "attn_q.weight"] == [64, 4 * 24] and p + "attn_q_a.weight" not in dims
    assert (dims[p + "attn_kv_a_mqa.weight"], dims[p + "attn_kv_a_norm.weight"]) == ([64, 32 + 8], [32])
    assert dims[p + "attn_k_b.weight"] == [16, 32, 4]   # {nope, kv_lora_rank, n_head}
    assert dims[p + "attn_v_b.weight"] == [32, 24, 4]   # {kv_lora_rank, value_length_mla, n_head}
    assert dims[p + "attn_output.weight"] == [4 * 24, 64]
    assert p + "ffn_norm.weight" in dims and p + "post_attention_norm.weight" not in dims
    assert dims["blk.0.ffn_gate.weight"] == [64, 64] and p + "exp_probs_b.bias" in dims   # dense lead, bias
    assert "blk.2.nextn.eh_proj.weight" in dims and not [n for n in dims if ".nextn." in n and n[4] != "2"]


def test_keys_set_to_none_are_left_out(tmp_path):
    path = make_tiny_gguf(tmp_path / "m.gguf", **DS2, mla={"q_lora_rank": None, "exp_probs_b": 0},
                          glm={"expert_gating_func": None, "expert_weights_scale": None, "nextn_predict_layers": None})
    dims, keys = tensors_and_keys(path)
    for gone in ("attention.q_lora_rank", "expert_gating_func", "expert_weights_scale", "nextn_predict_layers"):
        assert "deepseek2." + gone not in keys
    assert keys["deepseek2.block_count"] == 2 and not [n for n in dims if "exp_probs_b" in n or ".nextn." in n]
    assert ReferenceModel(path).config.q_lora_rank == 0   # absent: no q LoRA (DeepSeek-V2-Lite)


def test_quantized_per_head_matrices_read_back_per_head(tmp_path):
    """Q8_0 attn_k_b / attn_v_b, stacked per head as the experts are, dequantize to (n_head, rows, row)."""
    path = make_tiny_gguf(tmp_path / "m.gguf", **DS2, dtype="Q8_0", n_rot=16, mla={"nope": 32, "vh": 32})
    w = ReferenceModel(path).weights
    assert w["blk.0.attn_k_b.weight"].shape == (4, 32, 32) and w["blk.0.attn_v_b.weight"].shape == (4, 32, 32)
    assert not np.allclose(w["blk.0.attn_k_b.weight"][0], w["blk.0.attn_k_b.weight"][1])


@pytest.mark.parametrize("params, message", [
    ({"arch": "llama", "mla": {"kv_lora_rank": 32}}, "mla is for arch='deepseek2' only, not 'llama'"),
    ({**DS2, "mla": {"kv_lora_rank": 0}}, "mla['kv_lora_rank'] must be a positive integer, got 0"),
    ({**DS2, "mla": {"nope": 1.5}}, "mla['nope'] must be a positive integer, got 1.5"),
    ({**DS2, "n_expert": 0}, "arch='deepseek2' needs n_expert > 0"),
    ({**DS2, "mla": {"nope": 16}, "dtype": "Q8_0"}, "row length 16 is not a multiple of 32"),
])
def test_bad_deepseek2_parameters_are_refused_by_name(tmp_path, params, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        make_tiny_gguf(tmp_path / "bad.gguf", **params)


@pytest.mark.parametrize("q_lora_rank", [0, 32])
def test_incremental_state_gives_the_same_logits(tmp_path, q_lora_rank):
    """The reference's KV state holds each head's decompressed keys and values: continuing from it is the
    whole sequence's computation."""
    ref = ReferenceModel(make_tiny_gguf(tmp_path / "m.gguf", **DS2, mla={"q_lora_rank": q_lora_rank}))
    tokens = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511]
    whole = ref.logits(tokens)
    state = KVState()
    parts = [ref.logits(tokens[:6], state=state), ref.logits(tokens[6:7], state=state),
             ref.logits(tokens[7:], state=state)]
    assert np.allclose(np.concatenate(parts), whole, rtol=0, atol=1e-9 * np.abs(whole).max())
    assert state.k[0].shape == (10, 4, 16 + 8) and state.v[0].shape == (10, 4, 16)


def _fields(keys: dict, n_layer: int = 3, n_vocab: int = 512, scaling: str = "none", factor: float = 1.0,
            attn_factor: float = 1.0) -> dict:
    base = {"attention.kv_lora_rank": 32, "attention.key_length_mla": 24, "attention.value_length_mla": 16,
            "rope.dimension_count": 8, "attention.key_length": 40, "attention.head_count_kv": 1}

    def get(key, default):
        value = (base | keys).get(key, default)
        if value is None:
            raise ValueError(f"{key} is missing")
        return value

    return deepseek2_fields(get, n_layer, n_vocab, scaling, factor, attn_factor)


@pytest.mark.parametrize("n_layer, n_vocab, gating, sigmoid", [
    (47, GLM_47_FLASH_VOCAB, None, True),    # GLM-4.7-Flash: 47 trunk layers (block_count 48 with its nextn)
    (48, GLM_47_FLASH_VOCAB, None, True),
    (46, GLM_47_FLASH_VOCAB, None, False),
    (47, 151552, None, False),
    (27, 102400, None, False),               # DeepSeek-V2-Lite
    (47, GLM_47_FLASH_VOCAB, 1, False),      # the key, where present, decides
    (3, 512, 2, True),
    (3, 512, 0, False),                      # 0 is llama.cpp's NONE: the rule again
])
def test_the_gating_default_is_llama_cpps_rule(n_layer, n_vocab, gating, sigmoid):
    keys = {} if gating is None else {"expert_gating_func": gating}
    assert _fields(keys, n_layer, n_vocab)["sigmoid_gating"] is sigmoid


@pytest.mark.parametrize("scaling, factor, m_file, attn_factor, mscale", [
    ("none", 1.0, 0.0, 1.0, 1.0),
    ("yarn", 4.0, 0.1, 1.0, 1.0 + 0.1 * np.log(4.0)),                    # m = 1: attn_factor_org 1
    ("yarn", 4.0, 0.0, 0.8, 0.8 * (1.0 + 0.1 * np.log(4.0))),            # no m: gm(f, 1)
    ("yarn", 4.0, 0.0707, 1.0, 1.0 + 0.0707 * np.log(4.0)),              # m = 0.707
    ("linear", 4.0, 0.1, 1.0, (1.0 + 0.1 * np.log(4.0)) ** 2),            # without YaRN: attn_factor (1 + 0.1 ln f)
])
def test_the_scores_scale_is_llama_cpps(scaling, factor, m_file, attn_factor, mscale):
    """kq_scale = mscale^2 / sqrt(key_length_mla), mscale = attn_factor_org (1 + 0.1 m ln f) (deepseek2.cpp),
    each value worked out by hand here."""
    keys = {"rope.scaling.yarn_log_multiplier": m_file} if m_file else {}
    got = _fields(keys, scaling=scaling, factor=factor, attn_factor=attn_factor)["attn_scale"]
    assert got == pytest.approx(mscale * mscale / np.sqrt(24), rel=1e-12)


@pytest.mark.parametrize("keys, message", [
    ({"attention.head_count_kv": 2}, "head_count_kv is 2, not 1"),
    ({"attention.key_length": 48}, r"key_length 48 is not kv_lora_rank \+ rope.dimension_count = 40"),
    ({"attention.key_length_mla": 0}, "convert the model again"),
    ({"attention.key_length_mla": 8}, "leaves no dimension unrotated"),
    ({"attention.temperature_scale": 0.5}, "temperature_scale needs attention.temperature_length"),
])
def test_the_reference_refuses_what_it_cannot_compute(keys, message):
    with pytest.raises(ValueError, match=message):
        _fields(keys)
