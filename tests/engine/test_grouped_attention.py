"""Grouped prefill attention (attention_row_group: the rows of one prompt piece attend together per kv
head) against one-token-at-a-time decode, byte for byte: the whole KV cache (every layer's K and V
depends on every earlier layer's attention output of every row) and the last logits.

Covers head sizes 32, 64 and 128 (the grouped kernels' three shapes), 16 (the row-by-row fallback),
1-4 query heads per kv head, chunks shorter and longer than a group (24 / heads per kv head rows) with group tails,
chunks that start after a history, 1 and 2 threads, and the KV types that keep the per-row path.

Not here: accuracy against a reference (test_logits_reference.py), the mixed step's riders
(test_mixed_step.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

# (n_embd, n_head, n_head_kv): head size, query heads per kv head
SHAPES = {
    "hd32-rep2": (128, 4, 2),
    "hd64-rep3": (192, 3, 1),
    "hd128-rep2": (256, 2, 1),
    "hd64-rep1": (128, 2, 2),
    "hd32-rep4": (256, 8, 2),
    "hd16-rows": (64, 4, 2),
}
N_TOKENS = 83


def _prompt(seed: int, n: int = N_TOKENS) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, 500, size=n)]


def _state(engine: Engine, ctx: int) -> tuple[bytes, np.ndarray]:
    return engine.kv_read(ctx, 0, engine.context_len(ctx)), engine.logits(ctx)


def _one_by_one(engine: Engine, ctx: int, tokens: list[int]) -> tuple[bytes, np.ndarray]:
    engine.truncate(ctx, 0)
    engine.prefill(ctx, tokens, chunk=1)
    return _state(engine, ctx)


def check_chunked_prefill(shape: str, path, rng: np.random.Generator, **engine_kw) -> None:
    """Chunked prefill and a history + one piece against one token at a time, byte for byte, on 1 and 2
    threads (the q8_0 test runs it with kv_type="q8_0")."""
    tokens = _prompt(len(shape))
    for threads in (1, 2):
        engine = Engine(path, n_ctx=256, n_threads=threads, **engine_kw)
        want_kv, want_logits = _one_by_one(engine, 0, tokens)
        # one chunk, chunks around a group's size, and random ones
        chunks = [N_TOKENS, 16, 17, 31, 33, 2] + [int(c) for c in rng.integers(3, 60, size=3)]
        for chunk in chunks:
            engine.truncate(0, 0)
            engine.prefill(0, tokens, chunk=chunk)
            kv, logits = _state(engine, 0)
            assert kv == want_kv, f"{shape}, {threads} threads, chunk {chunk}: KV differs"
            assert np.array_equal(logits, want_logits), f"{shape}, {threads} threads, chunk {chunk}: logits"
        # a history first (odd length: the piece starts inside a K tile), then the rest in one piece
        for history in (1, 13, 40):
            engine.truncate(0, history)
            engine.prefill(0, tokens[history:])
            kv, logits = _state(engine, 0)
            assert kv == want_kv, f"{shape}, {threads} threads, history {history}: KV differs"
            assert np.array_equal(logits, want_logits), f"{shape}, {threads} threads, history {history}: logits"


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_chunked_prefill_equals_one_token_at_a_time(shape, tiny_model_factory):
    n_embd, n_head, n_head_kv = SHAPES[shape]
    path = tiny_model_factory(n_layer=3, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128, seed=5)
    check_chunked_prefill(shape, path, np.random.default_rng(len(shape)))


def test_two_pieces_and_riders_in_one_step_equal_separate_prefills(tiny_model_factory):
    """Two contexts' pieces side by side in one forward (two groups, separate caches) plus decode rows."""
    path = tiny_model_factory(n_layer=3, n_embd=192, n_head=3, n_head_kv=1, n_ff=128, seed=6)
    engine = Engine(path, n_ctx=256, n_slots=4, slot_ctx=256, n_threads=2)
    a, b, c = _prompt(1, 70), _prompt(2, 45), _prompt(3, 30)
    want = {}
    for ctx, toks in ((1, a), (2, b), (3, c + [7])):
        want[ctx] = _one_by_one(engine, ctx, toks)
    engine.truncate(1, 9)
    engine.truncate(2, 0)
    engine.truncate(3, 0)
    engine.prefill(3, c)
    rider = engine.step([(1, a[9:]), (2, b)], [3], [7])
    for ctx in (1, 2, 3):
        kv, logits = _state(engine, ctx)
        assert kv == want[ctx][0], f"context {ctx}: KV differs"
        assert np.array_equal(logits, want[ctx][1]), f"context {ctx}: logits"
    assert np.array_equal(rider[0], want[3][1])


@pytest.mark.parametrize("kv_type", ["q8_0", "f32"])
def test_other_kv_types_keep_chunking_bitwise(kv_type, tiny_model_factory):
    path = tiny_model_factory(n_layer=2, n_embd=128, n_head=2, n_head_kv=1, n_ff=128, seed=7)
    engine = Engine(path, n_ctx=128, n_threads=2, kv_type=kv_type)
    tokens = _prompt(9, 50)
    want_kv, want_logits = _one_by_one(engine, 0, tokens)
    for chunk in (50, 17):
        engine.truncate(0, 0)
        engine.prefill(0, tokens, chunk=chunk)
        kv, logits = _state(engine, 0)
        assert kv == want_kv and np.array_equal(logits, want_logits), f"{kv_type}, chunk {chunk}"
