"""The deepseek2 architecture (GLM-4.7-Flash, DeepSeek-V2-Lite, Moonlight, Kanana, Mistral Large 3): the engine's
logits against the fixtures' NumPy reference (tests/fixtures/reference.py, reference_mla.py), which computes
multi-head latent attention in its decompressed form (each head's keys and values made from the normed latent)
where the engine computes llama.cpp's absorbed form; the reference itself agrees with llama.cpp to ~1e-6 of the
logit scale with F32 KV (benchmarks/generated_vs_llamacpp.py --only deepseek2 --against reference --f32-kv).
Here: q LoRA on / off, the gating rule, YaRN's log multiplier, the attention temperature, quantized weights, a
prompt read at once, the nextn layers neither run nor needed, each part shown to matter, malformed metadata
refused by name, and what strata serve / strata setup make of the file (KV bytes, trunk, CPU only).

Not here: batching and chunking parity (test_bitwise.py runs its suite on a deepseek2 model too).
"""

from __future__ import annotations

import dataclasses

import gguf
import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.engine.test_moe import rewrite
from tests.fixtures.reference import ReferenceModel, reference_logits

LONG = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 2   # 32 positions
YARN = {"rope_scaling": ("yarn", 4.0, 16)}
# GLM-4.7-Flash's shape of the gating rule: 47 trunk layers (+ 1 nextn) and a vocabulary of 154,880
GLM47_VOCAB = tuple(f"<x{i}>" for i in range(154880 - 512))


def ds2_model(factory, dtype: str = "F32", mla: dict | None = None, glm: dict | None = None, **params):
    """3 trunk layers (layer 0 dense, 1-2 with 8 experts of 32, 2 a token, one shared, sigmoid routing with a
    selection bias, weights normalised x 2.5) and one nextn layer with GLM-4.7-Flash's nextn.* tensors; 64 wide,
    4 heads with keys of 16 + 8 (RoPE) and values of 16 over a latent of 32, no q LoRA."""
    defaults = {"arch": "deepseek2", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2, "seed": 12,
                "mla": mla or {}, "glm": glm or {}}
    return factory(dtype=dtype, **(defaults | params))


def engine_logits(path, kv_type: str = "f32") -> np.ndarray:
    return logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type), LONG)


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_deepseek2_matches_reference(tiny_model_factory, kv_type):
    path = ds2_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    # one KV head of latent 32 + RoPE 8; the nextn layer not counted
    assert (engine.arch, engine.n_layer, engine.n_head_kv, engine.head_dim) == ("deepseek2", 3, 1, 40)
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance("F32", kv_type))


@pytest.mark.parametrize("mla, glm, params", [
    ({"q_lora_rank": 24}, {}, {}),
    ({"q_lora_rank": 32, "exp_probs_b": 0}, {}, {}),
    ({}, {"expert_gating_func": 1}, {}),
    ({}, {"expert_gating_func": None, "expert_weights_norm": None, "expert_weights_scale": None}, {}),
    ({"kv_lora_rank": 48, "vh": 24, "q_lora_rank": 16}, {}, {"n_rot": 16}),
    ({}, {"expert_shared_count": 2, "leading_dense_block_count": 0, "nextn_predict_layers": 0}, {}),
    ({}, {}, YARN | {"rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}}),
    ({}, {}, YARN | {"rope_keys": {"rope.scaling.yarn_log_multiplier": 0.0707}}),
    ({}, {}, YARN | {"rope_keys": {"rope.scaling.attn_factor": 0.8}}),
    ({}, {}, {"rope_scaling": ("linear", 4.0, 16), "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}}),
    ({"temperature_length": 8}, {}, YARN | {"rope_keys": {"attention.temperature_scale": 0.5,
                                                          "rope.scaling.yarn_log_multiplier": 0.1}}),
], ids=["q-lora-24", "q-lora-32-no-bias", "softmax", "keys-absent", "latent-48-rope-16", "two-shared-no-dense-no-nextn",
        "yarn-m-1", "yarn-m-0.707", "yarn-no-m-attn-factor", "linear-m-1", "temperature"])
def test_options_match_reference(tiny_model_factory, mla, glm, params):
    """Latent 48 + RoPE 16 is a KV row of 64 (the tiled attention path's multiple of 16); keys absent: the
    softmax, unnormalised, unscaled (llama.cpp's defaults for deepseek2)."""
    path = ds2_model(tiny_model_factory, mla=mla, glm=glm, **params)
    check_close(engine_logits(path), reference_logits(path, LONG), 2e-5)


@pytest.mark.parametrize("n_layer, sigmoid", [(47, True), (46, False)])
def test_the_gating_rule_follows_llama_cpp(tiny_model_factory, n_layer, sigmoid):
    """No expert_gating_func: llama.cpp routes by the sigmoid when the TRUNK (block_count less the nextn
    layers) has 47 or 48 layers and the vocabulary 154,880 tokens (GLM-4.7-Flash), else by the softmax; both
    files below checked against llama.cpp through the reference (1e-6 / 1e-5 of the logit scale, F32 KV).
    46 trunk layers + 1 nextn is a block_count of 47: still the softmax."""
    path = ds2_model(tiny_model_factory, n_layer=n_layer, added_tokens=GLM47_VOCAB, glm={"expert_gating_func": None})
    ref = ReferenceModel(path)
    assert ref.config.sigmoid_gating is sigmoid
    got = logits_every_position(Engine(path, n_ctx=16, n_threads=2, kv_type="f32"), LONG[:8])
    check_close(got, ref.logits(LONG[:8]), 2e-5)


@pytest.mark.parametrize("experts", [(4, 4), (8, 2)])
def test_quantized_deepseek2_matches_reference(tiny_model_factory, experts):
    """Q8_0 everywhere the rows allow (keys 32 + 16, values 32, latent 32, q LoRA 32): the latent products,
    attn_k_b / attn_v_b per head, the experts. One MoE layer: a quantized router could flip a near choice."""
    n_expert, used = experts
    path = ds2_model(tiny_model_factory, "Q8_0", n_layer=1, n_rot=16, n_expert=n_expert, n_expert_used=used,
                     mla={"q_lora_rank": 32, "nope": 32, "vh": 32}, glm={"leading_dense_block_count": 0})
    for kv_type in ("f32", "f16"):
        check_close(engine_logits(path, kv_type), reference_logits(path, LONG), tolerance("Q8_0", kv_type))


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    path = ds2_model(tiny_model_factory, mla={"q_lora_rank": 32})
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], reference_logits(path, LONG)[-1:], 2e-5)
    check_close(engine.decode([0], [77]), reference_logits(path, LONG + [77])[-1:], 2e-5)


def test_the_nextn_layer_is_not_needed(tiny_model_factory, tmp_path):
    """GLM-4.7-Flash's multi-token-prediction block is not loaded: a file without one of its tensors runs
    and answers the same (the part test below shows running it would change the answer)."""
    path = ds2_model(tiny_model_factory)
    lacking = tmp_path / "lacking.gguf"
    rewrite(path, lacking, drop="blk.3.attn_kv_a_mqa.weight")
    assert np.array_equal(engine_logits(lacking), engine_logits(path))


PARTS = {   # change: (model parameters, what the reference leaves out)
    "kv-a-norm": ({}, lambda r: r.weights.update({n: np.ones_like(w) for n, w in r.weights.items()
                                                  if n.endswith("attn_kv_a_norm.weight")})),
    "q-a-norm": ({"mla": {"q_lora_rank": 32}}, lambda r: r.weights.update(
        {n: np.ones_like(w) for n, w in r.weights.items() if n.endswith("attn_q_a_norm.weight")})),
    "shared-rope-key": ({}, lambda r: r.weights.update(
        {n: np.concatenate([w[:32], np.zeros_like(w[32:])]) for n, w in r.weights.items()
         if n.endswith("attn_kv_a_mqa.weight")})),
    "query-scale": (YARN | {"rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}},
                    lambda r: setattr(r, "config", dataclasses.replace(r.config, attn_scale=1.0 / np.sqrt(24)))),
    "yarn-cos-sin": (YARN, lambda r: setattr(r, "config", dataclasses.replace(r.config, yarn_log_mul=1e-9))),
    "temperature": ({"mla": {"temperature_length": 8}, "rope_keys": {"attention.temperature_scale": 0.5}},
                    lambda r: setattr(r, "config", dataclasses.replace(r.config, attn_temp_scale=0.0))),
    "gating-default": ({"glm": {"expert_gating_func": None}},
                       lambda r: setattr(r, "config", dataclasses.replace(r.config, sigmoid_gating=True))),
    "shared-experts": ({}, lambda r: [r.weights.pop(n) for n in [n for n in r.weights if "_shexp." in n]]),
    "run-nextn": ({}, lambda r: setattr(r, "config", dataclasses.replace(
        r.config, n_layer=r.config.n_layer + 1, windowed=(False,) * (r.config.n_layer + 1)))),
    # each head its own attn_k_b / attn_v_b (numpy (n_head, ...)): head h given head h - 1's
    "k-b-per-head": ({}, lambda r: r.weights.update({n: np.roll(w, 1, axis=0) for n, w in r.weights.items()
                                                     if n.endswith("attn_k_b.weight")})),
    "v-b-per-head": ({}, lambda r: r.weights.update({n: np.roll(w, 1, axis=0) for n, w in r.weights.items()
                                                     if n.endswith("attn_v_b.weight")})),
}


@pytest.mark.parametrize("change", list(PARTS))
def test_each_part_changes_the_answer(tiny_model_factory, change):
    """The checks above can fail: a reference without any one part (the latent's norm, the q LoRA's norm, the
    rotated key all heads share, llama.cpp's query scale with a log multiplier, YaRN's cos / sin factor without
    one, the temperature, the softmax when the gating key is absent, the shared experts; or with the nextn layer
    run, or a head's attn_k_b / attn_v_b read as another head's) is far from the engine."""
    params, leave_out = PARTS[change]
    path = ds2_model(tiny_model_factory, **params)
    got = engine_logits(path)
    ref = ReferenceModel(path)
    check_close(got, ref.logits(LONG), 2e-5)
    leave_out(ref)
    assert np.abs(got - ref.logits(LONG)).max() > 1e-3 * np.abs(got).max()


@pytest.mark.parametrize("key, value, message", [
    ("deepseek2.attention.head_count_kv", 2, "invalid deepseek2 attention (head_count_kv 2,"),
    ("deepseek2.attention.value_length", 16, "value_length 16,"),
    ("deepseek2.attention.key_length", 48, "key_length 48,"),
    ("deepseek2.attention.key_length_mla", 8, "key_length_mla 8,"),
    ("deepseek2.attention.key_length_mla", None, "convert the model again"),
    ("deepseek2.attention.kv_lora_rank", None, "deepseek2.attention.kv_lora_rank"),
    ("deepseek2.nextn_predict_layers", 4, "nextn_predict_layers 4"),
    ("deepseek2.expert_gating_func", 3, "expert_gating_func 3 is not supported"),
])
def test_malformed_deepseek2_metadata_is_refused_by_name(tiny_model_factory, tmp_path, key, value, message):
    bad = tmp_path / "bad.gguf"
    if value is None:
        rewrite(ds2_model(tiny_model_factory), bad, drop=key)
    else:
        rewrite(ds2_model(tiny_model_factory), bad, kv={key: value})
    with pytest.raises(ValueError) as err:
        Engine(bad, n_ctx=16)
    assert message in str(err.value)


def test_a_yarn_log_multiplier_that_makes_no_scale_is_refused(tiny_model_factory, tmp_path):
    """m = -1.0 / 0.1 = -10 over a factor of 4: 1 + 0.1 m ln 4 < 0, no YaRN scale at all."""
    bad = tmp_path / "bad.gguf"
    rewrite(ds2_model(tiny_model_factory, **YARN), bad,
            kv={"deepseek2.rope.scaling.yarn_log_multiplier": (-1.0, gguf.GGUFValueType.FLOAT32)})
    with pytest.raises(ValueError, match=r"yarn_log_multiplier -1\.0+ makes no YaRN scale"):
        Engine(bad, n_ctx=16)


def test_a_temperature_without_its_length_is_refused(tiny_model_factory):
    path = ds2_model(tiny_model_factory, rope_keys={"attention.temperature_scale": 0.5})
    with pytest.raises(ValueError, match="temperature_scale needs a positive attention.temperature_length"):
        Engine(path, n_ctx=16)


def test_what_serve_and_setup_make_of_it(tiny_model_factory):
    """The KV a token takes (the one latent head's row, 40 wide, read as K and V; 3 trunk layers), the trunk without
    the nextn layer, the CPU only (the CUDA backend refuses latent attention), Mistral Large 3's temperature."""
    from strata.engine import GGUFFile
    from strata.installer.model_facts import read_model_facts

    from strata import _engine
    from strata.model_shape import attention_temperature, cpu_only, cuda_lacks, trunk_layers

    path = ds2_model(tiny_model_factory)
    md = GGUFFile(str(path)).metadata
    assert trunk_layers(md) == 3 and md["deepseek2.block_count"] == 4
    facts = read_model_facts(path)
    assert (facts.n_layer, facts.n_head_kv, facts.head_dim) == (3, 1, 40)
    # the latent row alone: the values read the keys (kv_layout::v_in_k)
    assert Engine(path, n_ctx=16, kv_type="f16").bytes_per_token == facts.kv_bytes_per_token == 3 * 40 * 2
    assert cpu_only(md) and cuda_lacks("deepseek2", 0, 0.0) == "deepseek2's multi-head latent attention"
    with pytest.raises(ValueError, match="backend 'cuda': .*deepseek2.* on the CPU backend only"):
        _engine.Engine(str(path), n_ctx=16, backend="cuda")
    hot = ds2_model(tiny_model_factory, mla={"temperature_length": 8}, rope_keys={"attention.temperature_scale": 0.5})
    assert attention_temperature(GGUFFile(str(hot)).metadata) == 0.5 and attention_temperature(md) == 0.0
    assert read_model_facts(hot).attn_temperature


def test_q8_0_kv_follows_the_latent_heads_size(tiny_model_factory):
    """--kv-type q8_0 quantizes the latent head (kv_lora_rank + n_rot) in blocks of 32: 64 is taken and sized as
    the memory check sizes it, 40 is refused by name (GLM-4.7-Flash's 576 too: over 256)."""
    from strata.model_shape import kv_bytes_per_token, q8_0_kv_takes

    path = ds2_model(tiny_model_factory, n_rot=16, mla={"kv_lora_rank": 48})
    assert Engine(path, n_ctx=16, kv_type="q8_0").bytes_per_token == kv_bytes_per_token(3, 1, 64, "q8_0")
    with pytest.raises(ValueError, match="multiple of 32, this model has 40"):
        Engine(ds2_model(tiny_model_factory), n_ctx=16, kv_type="q8_0")
    assert not q8_0_kv_takes(512 + 64)
