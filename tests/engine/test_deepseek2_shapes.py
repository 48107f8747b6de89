"""deepseek2 shapes that stretch the engine's scratch buffers (engine.cpp: xq_, mla_in_, mla_out_, mla_qa_, xn_):
per-head query parts wider than the latent KV row, a q LoRA wider than the embedding, values wider than the
keys, 64 heads over one latent head, a KV row that is not a multiple of 16 (the rows layout). Each against the
NumPy reference (tests/fixtures/reference_mla.py), for a prompt read at once (every row of the chunk through
the per-head products together: the most scratch) and one decode step after it.

Not here: the shapes of real models (test_deepseek2.py), batching parity (test_bitwise.py).
"""

from __future__ import annotations

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
