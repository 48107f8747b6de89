"""A tripwire for `snapshot.KV_REVISION`: the KV the engine computes for fixed tokens of tiny models of each
kind it runs differently (llama, YaRN RoPE, experts, deepseek2's latent, gemma3, glm4moe), projected on fixed
directions. When an engine change moves one of these projections, cached conversations an older engine computed no longer match what
this one computes: raise KV_REVISION (the conversation cache then drops the older files as stale instead of
restoring them) and record the new projections under it. F32 weights and KV: kernels that reorder a sum (another
ISA, thread count) move them by about 1e-7, far inside the tolerance (2e-5); the fixes that changed the KV
(RoPE scaling, routing, a scratch overrun) moved logits by percents."""

from __future__ import annotations

import numpy as np
import pytest

engine_mod = pytest.importorskip("strata.engine")
snapshot = pytest.importorskip("strata.engine.snapshot")

VARIANTS = {
    "llama": {},
    "llama_yarn": {"rope_scaling": ("yarn", 4.0, 64)},
    "qwen3moe": {"arch": "qwen3moe", "n_expert": 4, "n_expert_used": 2},
    "deepseek2": {"arch": "deepseek2", "n_layer": 2, "n_ff": 32, "n_expert": 4, "n_expert_used": 2},
    "gemma3": {"arch": "gemma3"},
    "glm4moe": {"arch": "glm4moe", "n_layer": 3, "n_ff": 64, "n_expert": 8, "n_expert_used": 2},
}

# KV_REVISION -> variant -> the KV projected on 8 fixed random directions, over its norm (a 1% change of
# the RoPE base moves them by about 3e-3)
RECORDED: dict[int, dict[str, list[float]]] = {
    2: {
        "llama": [-0.7469335, -0.0589803, -1.1845388, -0.9103874, 1.7444519, 0.5226990, -2.0060997, -0.2029934],
        "llama_yarn": [-1.2113048, 0.0874115, -0.6861314, -0.4165359, 0.5897208, 0.5928800, -1.0375160, -0.3980915],
        "qwen3moe": [-0.7941487, -0.9552291, -0.7843301, -1.2716277, -0.1093002, 0.4070362, -1.2167009, 0.2605194],
        "deepseek2": [-0.8191252, -0.6603012, -1.0746032, 0.4618857, -0.5127324, -0.5696314, -0.3790441, -0.2594553],
        "gemma3": [-1.3630710, 0.8055074, -1.0198812, -1.4217546, 0.7696486, 1.6253862, -0.9380001, -0.8960858],
        "glm4moe": [-0.5256597, -0.6982082, -0.4041617, 0.6878213, -1.9224361, -0.0819697, 0.2346038, 0.7022906],
    },
}
TOKENS = [(i * 37) % 500 + 3 for i in range(40)]


def kv_features(path) -> np.ndarray:
    engine = engine_mod.Engine(path, n_ctx=64, n_threads=1, kv_type="f32")
    engine.prefill(0, TOKENS)
    kv = np.frombuffer(engine.kv_read(0, 0, len(TOKENS)), dtype=np.float32).astype(np.float64)
    directions = np.random.default_rng(1).standard_normal((8, kv.size))
    return directions @ kv / np.linalg.norm(kv)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_kv_of_each_kind_of_model_is_the_one_recorded_for_this_kv_revision(tiny_model_factory, variant):
    assert snapshot.KV_REVISION in RECORDED, f"record the projections of KV_REVISION {snapshot.KV_REVISION} here"
    path = tiny_model_factory(dtype="F32", seed=7, **VARIANTS[variant])
    got, want = kv_features(path), RECORDED[snapshot.KV_REVISION][variant]
    assert np.allclose(got, want, rtol=0, atol=2e-5), (
        f"the KV this engine computes for the tiny {variant} model changed ({got.tolist()} against {want}): cached "
        f"states an older engine computed would be restored as this one's. Raise snapshot.KV_REVISION and "
        f"record the new projections under it")
