"""Z.ai's glm4moe architecture (GLM-4.5-Air, GLM-4.5, GLM-4.6): the engine's logits against the fixtures'
NumPy reference (tests/fixtures/reference.py), which computes the architecture's parts from their
definition: sigmoid expert routing with a selection bias, weights normalised and scaled, shared experts
beside the chosen ones, dense leading layers, Q/K/V biases, NEOX RoPE over half the head, and the
trailing multi-token-prediction layer that must not run; and the errors of malformed glm4moe metadata.

Not here: batching and chunking parity (test_bitwise.py runs its suite on a glm4moe model too); GLM's
chat format (tests/text, tests/server).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_logits_reference import check_close, logits_every_position, tolerance
from tests.fixtures.reference import ReferenceModel, reference_logits

LONG = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12] * 2   # 32 positions


def glm_model(factory, dtype: str = "F32", glm: dict | None = None, **params):
    """A 3-layer glm4moe model (layer 0 dense, 1-2 with 8 experts of 32, 2 a token, one shared) plus one
    nextn layer, 64 wide, 4 heads of 16 over 2 KV heads, RoPE over 8 of 16 dimensions."""
    defaults = {"arch": "glm4moe", "n_layer": 3, "n_ff": 32, "n_expert": 8, "n_expert_used": 2, "n_rot": 8,
                "seed": 12, "glm": glm or {}}
    return factory(dtype=dtype, **(defaults | params))


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
def test_glm4moe_matches_reference(tiny_model_factory, kv_type):
    path = glm_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type)
    assert engine.arch == "glm4moe" and engine.n_layer == 3 and (engine.n_expert, engine.n_expert_used) == (8, 2)
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance("F32", kv_type))


@pytest.mark.parametrize("glm", [
    {"expert_weights_norm": 0, "expert_weights_scale": 1.0},     # raw sigmoids
    {"expert_gating_func": 0},                                     # none: the sigmoid, as llama.cpp reads it
    {"expert_gating_func": 1},                                     # the softmax (llama.cpp's other choice)
    {"expert_gating_func": 1, "expert_weights_norm": 0},          # ... over all experts: weights short of 1
    {"expert_shared_count": 2, "leading_dense_block_count": 0},   # two shared experts, no dense layer
    {"expert_shared_count": 0, "nextn_predict_layers": 0},        # neither
], ids=["unnormalised", "gating-0", "softmax", "softmax-unnormalised", "two-shared", "no-shared"])
def test_glm4moe_options_match_reference(tiny_model_factory, glm):
    path = glm_model(tiny_model_factory, glm=glm)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), 2e-5)


@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_K"])
def test_quantized_glm4moe_matches_reference(tiny_model_factory, dtype):
    """Quantized experts and shared experts in one MoE layer whose attention and embeddings are F32 (a
    quantized router could flip a near choice; test_moe.py says why one layer)."""
    from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

    exact = {role: "F32" for role in ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_output")}
    shape = {"n_embd": 256, "n_ff": 256} if dtype == "Q4_K" else {}
    path = glm_model(tiny_model_factory, dtype, n_layer=1, type_overrides=exact,
                     glm={"leading_dense_block_count": 0}, **(shape or {}))
    assert not shape or shape["n_embd"] == K_QUANT_SHAPE["n_embd"]
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    check_close(logits_every_position(engine, LONG), reference_logits(path, LONG), tolerance(dtype, "f32"))


def test_a_prompt_read_at_once_matches_reference(tiny_model_factory):
    path = glm_model(tiny_model_factory)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type="f32")
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], reference_logits(path, LONG)[-1:], 2e-5)


@pytest.mark.parametrize("change", ["softmax", "no-bias", "no-norm", "no-scale", "no-shared", "run-nextn",
                                    "softmax-of-chosen"])
def test_each_part_changes_the_answer(tiny_model_factory, change):
    """The checks above can fail: a reference without any one part is far from the engine. With the
    softmax (expert_gating_func 1), llama.cpp still adds exp_probs_b to choose and scales the weights:
    the softmax of the chosen scores alone (Mixtral's and qwen3moe's routing) is far from it."""
    path = glm_model(tiny_model_factory, glm={"expert_gating_func": 1} if change == "softmax-of-chosen" else None)
    got = logits_every_position(Engine(path, n_ctx=64, n_threads=2, kv_type="f32"), LONG)
    ref = ReferenceModel(path)
    if change == "softmax":
        ref.config = dataclasses.replace(ref.config, sigmoid_gating=False)
    elif change == "no-bias":
        for name in [n for n in ref.weights if n.endswith("exp_probs_b.bias")]:
            ref.weights[name] = np.zeros_like(ref.weights[name])
    elif change == "no-norm":
        ref.config = dataclasses.replace(ref.config, expert_weights_norm=False)
    elif change == "no-scale":
        ref.config = dataclasses.replace(ref.config, expert_weights_scale=1.0)
    elif change == "softmax-of-chosen":
        ref.config = dataclasses.replace(ref.config, expert_probs=False)   # Mixtral's routing
    elif change == "no-shared":
        for name in [n for n in ref.weights if "_shexp." in n]:
            del ref.weights[name]
    else:
        ref.config = dataclasses.replace(ref.config, n_layer=ref.config.n_layer + 1, windowed=(False,) * 4)
    assert np.abs(got - ref.logits(LONG)).max() > 1e-3 * np.abs(got).max()


@pytest.mark.parametrize("glm, message", [
    ({"expert_gating_func": 3}, "expert_gating_func 3 is not supported (0 or 2 sigmoid, 1 softmax)"),
    ({"expert_weights_scale": -1.0}, "expert_weights_scale -1.000000 is invalid"),
    ({"leading_dense_block_count": 9}, "invalid glm4moe experts (expert_shared_count 1, leading_dense_block_count 9)"),
])
def test_malformed_glm4moe_metadata_is_refused_by_name(tiny_model_factory, glm, message):
    with pytest.raises(ValueError) as err:
        Engine(glm_model(tiny_model_factory, glm=glm), n_ctx=16)
    assert message in str(err.value)


@pytest.mark.parametrize("key, value, message", [
    ("glm4moe.nextn_predict_layers", 4, "nextn_predict_layers 4 must be in [0, block_count 4)"),
    ("glm4moe.expert_shared_count", None, "glm4moe.expert_shared_count"),
    ("glm4moe.rope.dimension_sections", [8, 8, 0, 0], "rope.dimension_sections (multimodal M-RoPE) is not supported"),
])
def test_keys_the_engine_cannot_run_are_refused_by_name(tiny_model_factory, tmp_path, key, value, message):
    """A file whose block_count holds no trunk, one without its shared-expert count, GLM-4.5V's M-RoPE."""
    import gguf

    from tests.engine.test_moe import rewrite

    bad = tmp_path / "bad.gguf"
    if value is None:
        rewrite(glm_model(tiny_model_factory), bad, drop=key)
    elif isinstance(value, list):   # an INT32 array, as the converter writes the sections
        rewrite(glm_model(tiny_model_factory), bad, kv={key: (value, gguf.GGUFValueType.ARRAY)})
    else:
        rewrite(glm_model(tiny_model_factory), bad, kv={key: value})
    with pytest.raises(ValueError) as err:
        Engine(bad, n_ctx=16)
    assert message in str(err.value)


@pytest.mark.parametrize("element", ["UINT8", "INT16", "INT32", "INT64"])
def test_zero_rope_sections_of_any_integer_type_load(tiny_model_factory, tmp_path, element):
    """GLM-4.5's converter writes rope.dimension_sections as zeros (no M-RoPE): whatever the integers'
    width, the file loads (the check read 4 bytes an element of any type but 8-bit, so 2-byte zeros were
    read on into the bytes after them and refused as M-RoPE), and [8, 8, 0, 0] is refused."""
    import gguf

    from tests.engine.test_moe import rewrite

    array, sub = gguf.GGUFValueType.ARRAY, gguf.GGUFValueType[element]
    ok, bad = tmp_path / "ok.gguf", tmp_path / "bad.gguf"
    rewrite(glm_model(tiny_model_factory), ok, kv={"glm4moe.rope.dimension_sections": ([0, 0, 0, 0], array, sub)})
    assert Engine(ok, n_ctx=16).n_layer == 3
    rewrite(glm_model(tiny_model_factory), bad, kv={"glm4moe.rope.dimension_sections": ([0, 0, 0, 8], array, sub)})
    with pytest.raises(ValueError, match=r"rope.dimension_sections \(multimodal M-RoPE\) is not supported"):
        Engine(bad, n_ctx=16)


def test_memory_figures_count_the_trunk_only(tiny_model_factory):
    """strata serve's memory check and strata setup size KV and packed copies for the layers the engine
    runs: not the nextn layer."""
    from strata.engine import GGUFFile
    from strata.installer.model_facts import read_model_facts
    from strata.server.memory_check import packed_bytes

    from strata.model_shape import trunk_layers

    path = glm_model(tiny_model_factory)
    gguf = GGUFFile(str(path))
    assert trunk_layers(gguf.metadata) == 3 and gguf.metadata["glm4moe.block_count"] == 4
    assert read_model_facts(path).n_layer == 3
    engine = Engine(path, n_ctx=64, n_threads=2)
    assert engine.bytes_per_token == read_model_facts(path).kv_bytes_per_token
    every = packed_bytes(gguf.tensors, supported=lambda t: True, size=lambda t, rows, cols: rows * cols)
    trunk = packed_bytes(gguf.tensors, supported=lambda t: True, size=lambda t, rows, cols: rows * cols, n_layer=3)
    assert 0 < trunk < every
