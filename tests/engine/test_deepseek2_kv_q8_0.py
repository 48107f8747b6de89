"""deepseek2's latent attention with the q8_0 KV cache: the engine against a NumPy reference of the same
arithmetic. The engine keeps ONE row per token, [normed latent (kv_lora_rank) | rotated shared key (n_rot)],
as K and V, and scores each head's absorbed query [attn_k_b[h] q_nope | rope(q_pe)] against it (llama.cpp's
absorbed form); with kv_type q8_0 that row is rounded to q8_0 blocks (fp16 scale) and each absorbed query to
q8_0 blocks (float scale), as for every other model (test_kv_q8_0.py). The reference below computes that
form from the fixtures' weights (reference.py's own MLA is the decompressed form: per-head keys and values)
with those roundings, so only float32 rounding separates it from the engine (measured 6e-7 to 1e-6 of the
logit scale, bound 5e-4); the plain reference is 2.6e-2 away (what q8_0 costs) and one that rounds the
rows but not the queries 1.9e-2: the bound tests both roundings.

Not here: f16 / f32 KV (test_deepseek2.py), the q8_0 byte layout and bitwise rules (test_kv_q8_0.py's
models share the kernels).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

import tests.fixtures.reference as reference
from tests.engine.test_kv_q8_0 import logits_one_by_one, q8_0_values, relative_error
from tests.fixtures.reference import ReferenceModel
from tests.fixtures.reference_mla import mla_parts

TOKENS = [int(t) for t in np.random.default_rng(5).integers(3, 500, size=40)]   # 3 tiles of 16, the last partial


def absorbed_qkv(model: ReferenceModel, h: np.ndarray, p: str, positions: np.ndarray):
    """(queries (T, n_head, R + n_rot), the rows (T, 1, R + n_rot) as K, the same as V) of layer prefix p in
    llama.cpp's absorbed form; notes p for the heads' outputs (LatentReference._attention)."""
    q_nope, q_pe, latent, k_pe = mla_parts(model, h, p, positions)
    row = np.concatenate([latent[:, None], k_pe], axis=-1)
    q_latent = np.einsum("thn,hrn->thr", q_nope, model.weights[p + "attn_k_b.weight"])   # (T, n_head, R)
    model.layer_prefix = p
    return np.concatenate([q_latent, q_pe], axis=-1), row, row


class LatentReference(ReferenceModel):
    """The reference in the absorbed form (with absorbed_qkv in place of reference.mla_qkv): scores against
    the rows, the heads' latent outputs through attn_v_b; `roundings`: the q8_0 cache's."""

    roundings = False

    def _attention(self, q, k, v, n_past, window=0, sinks=None):
        c, n_tok = self.config, q.shape[0]
        if self.roundings:
            q, k, v = q8_0_values(q, False), q8_0_values(k, True), q8_0_values(v, True)
        latent = super()._attention(q, k, v[..., :c.kv_lora_rank], n_past, window, sinks)   # V: the row's latent
        latent = latent.reshape(n_tok, c.n_head, c.kv_lora_rank)
        out = np.einsum("thr,hvr->thv", latent, self.weights[self.layer_prefix + "attn_v_b.weight"])
        return out.reshape(n_tok, c.n_head * c.value_length_mla)


class Q8LatentReference(LatentReference):
    roundings = True


MODELS = {   # make_tiny_gguf parameters: rows of 48 + 16 and 32 + 32 (q8_0 takes multiples of 32)
    "latent-48-rope-16": {"n_rot": 16, "mla": {"kv_lora_rank": 48}},
    "latent-32-rope-32-q-lora": {"n_rot": 32, "mla": {"q_lora_rank": 32, "nope": 32, "vh": 32},
                                 "rope_scaling": ("yarn", 4.0, 16),
                                 "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1}},
}


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_equal_the_absorbed_reference_with_q8_0_roundings(tiny_model_factory, monkeypatch, name):
    path = tiny_model_factory(arch="deepseek2", dtype="F32", n_layer=3, n_ff=32, n_expert=4, n_expert_used=4,
                              seed=7, **MODELS[name])
    got = logits_one_by_one(Engine(path, n_ctx=64, n_threads=2, kv_type="q8_0"), TOKENS)
    plain = ReferenceModel(path).logits(TOKENS)
    monkeypatch.setattr(reference, "mla_qkv", absorbed_qkv)
    exact = LatentReference(path).logits(TOKENS)   # the absorbed form without roundings: the decompressed one
    assert relative_error(exact, plain) < 1e-9
    assert relative_error(got, Q8LatentReference(path).logits(TOKENS)) < 5e-4
    assert relative_error(got, plain) > 1e-3   # the roundings matter: the bound above tests them
