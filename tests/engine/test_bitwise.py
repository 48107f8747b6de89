"""The bitwise rule: a row's logits never depend on batching, chunking, threads, or how a context
got its KV (fresh prefill, copy, truncate + prefill, snapshot restore). Compared with np.array_equal.

Not here: accuracy (test_logits_reference.py) or damaged snapshots (test_snapshot.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

PROMPT = [3, 17, 300, 42, 7, 99, 100, 5, 260, 511, 64, 8, 9, 300, 300, 12, 44, 45, 46, 47, 48]
NEXT = [77, 78, 79]


@pytest.fixture(scope="module", params=["Q4_1", "Q4_K", "Q4_K experts", "Q8_0 gpt-oss", "Q4_1 mistral3",
                                                "Q8_0 glm4moe", "Q8_0 gemma3", "Q8_0 deepseek2"])
def engine(request, tiny_model_factory):
    dtype, _, kind = request.param.partition(" ")
    shape = K_QUANT_SHAPE if dtype.endswith("_K") else {}
    # experts: rows of one forward share some experts and not others (8 experts, 2 a token)
    experts = {"n_expert": 8, "n_expert_used": 2} if kind in ("experts", "gpt-oss", "glm4moe", "deepseek2") else {}
    # gpt-oss: sinks, a window of 8 positions in every other layer (PROMPT is longer), MXFP4 experts
    if kind == "gpt-oss":
        experts |= {"arch": "gpt-oss", "sliding_window": 8, "n_layer": 3,
                    "type_overrides": {"ffn_gate": "MXFP4", "ffn_up": "MXFP4", "ffn_down": "MXFP4"}}
    # mistral3: each row's query temperature by its own position (YaRN's original context of 8 < PROMPT)
    if kind == "mistral3":
        experts |= {"arch": "mistral3", "rope_scaling": ("yarn", 4.0, 8),
                    "rope_keys": {"attention.temperature_scale": 0.5, "rope.scaling.yarn_log_multiplier": 1.0}}
    # glm4moe: sigmoid routing with a selection bias, a shared expert, a dense first layer, a nextn layer
    if kind == "glm4moe":
        experts |= {"arch": "glm4moe", "n_layer": 3, "n_rot": 8}
    # gemma3: windows of 8 in layers 0 and 2 with their own RoPE, sandwich norms, GeGLU, a logit cap
    if kind == "gemma3":
        experts |= {"arch": "gemma3", "n_layer": 3, "sliding_window": 8, "swa_pattern": 2, "rope_freq_base": 1e6,
                    "rope_scaling": ("linear", 4.0, 64), "rope_keys": {"final_logit_softcapping": 5.0}}
    # deepseek2: latent attention (a KV row of 32 + 32, q LoRA), each row's temperature by its own position
    if kind == "deepseek2":
        experts |= {"arch": "deepseek2", "n_layer": 3, "n_ff": 32, "n_rot": 32, "rope_scaling": ("yarn", 4.0, 8),
                    "rope_keys": {"rope.scaling.yarn_log_multiplier": 0.1, "attention.temperature_scale": 0.5},
                    "mla": {"q_lora_rank": 32, "nope": 32, "vh": 32, "temperature_length": 8}}
    path = tiny_model_factory(dtype=dtype, seed=11, **shape, **experts)
    return Engine(path, n_ctx=128, n_slots=4, n_groups=2, n_threads=2)


def fresh_logits(engine: Engine, tokens: list[int], ctx: int = 1) -> np.ndarray:
    engine.truncate(ctx, 0)
    engine.prefill(ctx, tokens)
    return engine.logits(ctx)


def test_prefill_chunking_does_not_change_logits(engine):
    want = fresh_logits(engine, PROMPT)
    for chunk in (1, 2, 3, 7, 20, 512):
        engine.truncate(1, 0)
        engine.prefill(1, PROMPT, chunk=chunk)
        assert np.array_equal(engine.logits(1), want), f"chunk={chunk}"
    # prefill in several calls too
    engine.truncate(1, 0)
    engine.prefill(1, PROMPT[:5])
    engine.prefill(1, PROMPT[5:13])
    engine.prefill(1, PROMPT[13:])
    assert np.array_equal(engine.logits(1), want)


def test_decode_equals_prefill_of_one_more_token(engine):
    want = fresh_logits(engine, PROMPT + NEXT[:1])
    fresh_logits(engine, PROMPT)
    assert np.array_equal(engine.decode([1], NEXT[:1])[0], want)


def test_batched_decode_equals_separate_decodes(engine):
    prompts = {1: PROMPT, 2: PROMPT[:9], 3: PROMPT[4:], 4: [5, 6]}
    separate = {}
    for ctx, p in prompts.items():
        fresh_logits(engine, p, ctx)
        separate[ctx] = [engine.decode([ctx], [t])[0] for t in NEXT]
    for ctx, p in prompts.items():
        fresh_logits(engine, p, ctx)
    for step, t in enumerate(NEXT):
        order = [4, 2, 1, 3] if step % 2 else [1, 2, 3, 4]
        out = engine.decode(order, [t] * 4)
        for row, ctx in enumerate(order):
            assert np.array_equal(out[row], separate[ctx][step]), f"ctx {ctx} step {step}"
            # the forward writes the rows into the returned array; each context keeps its row's logits
            assert np.array_equal(engine.logits(ctx), out[row]), f"ctx {ctx} step {step}"
    # a subset of the contexts in one batch, with the main context too
    fresh_logits(engine, PROMPT, 0)
    fresh_logits(engine, PROMPT[:9], 2)
    out = engine.decode([2, 0], [NEXT[0], NEXT[0]])
    assert np.array_equal(out[0], separate[2][0]) and np.array_equal(out[1], separate[1][0])


def test_copy_then_prefill_equals_fresh_prefill(engine):
    want = fresh_logits(engine, PROMPT + NEXT, 3)
    fresh_logits(engine, PROMPT, 1)
    engine.copy(1, 2, len(PROMPT))
    assert engine.context_tokens(2) == PROMPT
    assert np.array_equal(engine.logits(2), engine.logits(1))  # whole history copied: logits too
    engine.prefill(2, NEXT)
    assert np.array_equal(engine.logits(2), want)
    engine.copy(1, 4, 10)  # a prefix
    assert not engine.has_logits(4)
    engine.prefill(4, PROMPT[10:] + NEXT)
    assert np.array_equal(engine.logits(4), want)


def test_truncate_then_prefill_equals_fresh_prefill(engine):
    other = PROMPT[:8] + [400, 401, 402, 403]
    want = fresh_logits(engine, other, 2)
    fresh_logits(engine, PROMPT, 1)
    engine.truncate(1, 8)
    assert engine.context_tokens(1) == PROMPT[:8] and not engine.has_logits(1)
    engine.prefill(1, other[8:])
    assert np.array_equal(engine.logits(1), want)


def test_snapshot_restore_then_prefill_equals_fresh_prefill(engine):
    want = fresh_logits(engine, PROMPT + NEXT, 3)
    fresh_logits(engine, PROMPT, 1)
    image = engine.snapshot(1)
    fresh_logits(engine, [9, 9, 9], 2)  # restore replaces whatever the context held
    assert engine.restore(2, image) == len(PROMPT)
    assert engine.context_tokens(2) == PROMPT
    engine.prefill(2, NEXT)
    assert np.array_equal(engine.logits(2), want)


def test_thread_count_does_not_change_logits(tiny_model_factory):
    path = tiny_model_factory(dtype="Q5_1", seed=2)
    results = []
    for n_threads in (1, 2, 3):
        e = Engine(path, n_ctx=64, n_slots=2, n_threads=n_threads)
        e.prefill(1, PROMPT)
        e.prefill(2, PROMPT[:4])
        results.append(e.decode([1, 2], NEXT[:2]))
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_default_model_batched_decode_and_restore(default_model_path):
    e = Engine(default_model_path, n_ctx=256, n_slots=3, n_threads=2)
    prompt = e.tokenize("The capital of France is")
    e.prefill(1, prompt)
    single = e.decode([1], [5])[0]
    e.prefill(2, prompt + [5, 6])
    image = e.snapshot(1, len(prompt))
    assert e.restore(3, image) == len(prompt)
    out = e.decode([2, 3], [7, 5])
    assert np.array_equal(out[1], single)
    e.truncate(1, len(prompt))
    assert np.array_equal(e.decode([1], [5])[0], single)
