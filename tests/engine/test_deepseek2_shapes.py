"""deepseek2 past the shapes of test_deepseek2.py: shapes that stretch the engine's scratch buffers (engine.cpp:
xq_, mla_in_, mla_out_, mla_qa_, xn_): per-head query parts wider than the latent KV row, a q LoRA wider than
the embedding, values wider than the keys, 64 heads over one latent head, a KV row that is not a multiple of 16
(the rows layout), each against the NumPy reference (tests/fixtures/reference_mla.py) for a prompt read at once
(every row of the chunk through the per-head products together: the most scratch) and one decode step after
it; grouped expert routing (DeepSeek-V2 / V3's n_group / topk_group) refused by name; GLM-4.7-Flash's attention
shape in parts after a long history.

Not here: the shapes of real models (test_deepseek2.py), batching parity (test_bitwise.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_deepseek2 import LONG, ds2_model
from tests.engine.test_logits_reference import check_close
from tests.fixtures.reference import reference_logits

SHAPES = {   # id: (mla keys, model parameters)
    # attn_k_b's rows (nope 256) wider than the KV row (16 + 8): n_head x 256 activations to quantize
    "nope-past-key-row": ({"kv_lora_rank": 16, "nope": 256}, {}),
    "q-lora-past-embd": ({"q_lora_rank": 256}, {}),
    "values-past-key-row": ({"kv_lora_rank": 16, "vh": 200}, {}),
    "64-heads": ({"kv_lora_rank": 16, "nope": 48, "vh": 64, "q_lora_rank": 200}, {"n_head": 64, "n_embd": 128}),
    "row-of-28": ({"kv_lora_rank": 20, "nope": 12}, {}),   # 20 + 8: K and V as rows, not tiles
}


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_odd_shapes_match_reference(tiny_model_factory, shape, kv_type):
    mla, params = SHAPES[shape]
    path = ds2_model(tiny_model_factory, n_layer=2, mla=mla, **params)
    engine = Engine(path, n_ctx=64, n_threads=2, kv_type=kv_type, max_chunk=32)
    ref = reference_logits(path, LONG + [77])
    rel = 2e-5 if kv_type == "f32" else 3e-3
    engine.prefill(0, LONG)
    check_close(engine.logits(0)[None], ref[len(LONG) - 1:len(LONG)], rel)
    check_close(engine.decode([0], [77]), ref[-1:], rel)


@pytest.mark.parametrize("groups, used", [(4, 2), (2, None)])
def test_grouped_expert_routing_is_refused_by_name(tiny_model_factory, groups, used):
    """llama.cpp routes within the best `expert_group_used_count` of `expert_group_count` groups (DeepSeek-V2 / V3's
    n_group / topk_group; llama-graph.cpp build_moe_ffn); the engine routes over all experts, so a file whose
    groups would narrow the choice is refused by name rather than answered differently."""
    glm = {"expert_group_count": groups, "expert_group_used_count": used}
    with pytest.raises(ValueError, match=f"expert_group_count {groups}.*expert_group_used_count"):
        Engine(ds2_model(tiny_model_factory, glm=glm), n_ctx=16)


def test_one_group_or_every_group_routes_as_before(tiny_model_factory):
    """GLM-4.7-Flash's and DeepSeek-V2-Lite's n_group 1 / topk_group 1 (every group used: no narrowing)."""
    plain = ds2_model(tiny_model_factory, n_layer=2)
    for groups, used in ((1, 1), (4, 4)):
        path = ds2_model(tiny_model_factory, n_layer=2,
                         glm={"expert_group_count": groups, "expert_group_used_count": used})
        got = Engine(path, n_ctx=16, n_threads=2, kv_type="f32").decode([0], [5])
        assert (got == Engine(plain, n_ctx=16, n_threads=2, kv_type="f32").decode([0], [5])).all()


def test_glm_47_flash_attention_in_parts_after_a_long_history(tiny_model_factory):
    """GLM-4.7-Flash's attention shape (20 heads over one 512 + 64 latent row, f16 KV: the values read from K's
    tiles) past the 1,024 positions where one decoding row's attention is cut into parts over the threads
    (forward.cpp attention_parts, 18 value parts of 32 dimensions): in parts (2 threads) byte for byte the whole
    row (1 thread), and the reference's answer."""
    path = ds2_model(tiny_model_factory, n_layer=2, n_rot=64, n_head=20, n_embd=80, ctx_len=2048, seed=5,
                     mla={"kv_lora_rank": 512, "nope": 32, "vh": 16})
    tokens = [int(t) for t in np.random.default_rng(0).integers(1, 500, 1103)]
    outs = []
    for n_threads in (1, 2):
        engine = Engine(path, n_ctx=1200, n_threads=n_threads, kv_type="f16")
        engine.prefill(0, tokens[:1100])
        outs.append(np.stack([engine.decode([0], [t])[0] for t in tokens[1100:]]))
    assert np.array_equal(outs[0], outs[1])
    check_close(outs[1], reference_logits(path, tokens)[-3:], 3e-3)
