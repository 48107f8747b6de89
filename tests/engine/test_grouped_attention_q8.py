"""Grouped prefill attention over q8_0 KV (attention_row_group's q8_0 kernels: the rows of one prompt
piece attend together per kv head) against one-token-at-a-time decode, byte for byte: the whole KV
cache (every layer's K and V depends on every earlier layer's attention output of every row) and the
last logits.

Covers head sizes 32, 64 and 128 (the grouped kernels' three shapes), 1-4 query heads per kv head,
chunks shorter and longer than a group (24 / heads per kv head rows) with group tails, chunks that
start after a history (inside a K tile), pieces longer than a span of widened V rows, 1 and 2
threads, and a snapshot restore followed by prefill.

Not here: q8_0's accuracy against a NumPy reference (test_kv_q8_0.py), f16 (test_grouped_attention.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.engine.test_grouped_attention import _one_by_one, _prompt, _state, check_chunked_prefill

# (n_embd, n_head, n_head_kv): head size, query heads per kv head
SHAPES = {
    "hd32-rep2": (128, 4, 2),
    "hd64-rep3": (192, 3, 1),
    "hd128-rep2": (256, 2, 1),
    "hd64-rep1": (128, 2, 2),
    "hd32-rep4": (256, 8, 2),
    "hd128-rep1": (256, 2, 2),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_q8_chunked_prefill_equals_one_token_at_a_time(shape, tiny_model_factory):
    n_embd, n_head, n_head_kv = SHAPES[shape]
    path = tiny_model_factory(n_layer=3, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128, seed=5)
    check_chunked_prefill(shape, path, np.random.default_rng(len(shape) + 100), kv_type="q8_0")


def test_q8_restore_then_prefill_equals_fresh_prefill(tiny_model_factory):
    """A snapshot of a history restored into a fresh engine, then the rest as one piece == one token at a time."""
    path = tiny_model_factory(n_layer=3, n_embd=192, n_head=3, n_head_kv=1, n_ff=128, seed=6)
    engine = Engine(path, n_ctx=256, n_threads=2, kv_type="q8_0")
    tokens = _prompt(11, 90)
    want_kv, want_logits = _one_by_one(engine, 0, tokens)
    for history in (29, 48):
        engine.truncate(0, 0)
        engine.prefill(0, tokens[:history], chunk=1)
        image = engine.snapshot(0)
        fresh = Engine(path, n_ctx=256, n_threads=2, kv_type="q8_0")
        assert fresh.restore(0, image) == history
        fresh.prefill(0, tokens[history:])
        kv, logits = _state(fresh, 0)
        assert kv == want_kv, f"history {history}: KV differs"
        assert np.array_equal(logits, want_logits), f"history {history}: logits"


@pytest.mark.parametrize("shape", ["hd32-rep2", "hd64-rep3"])
def test_q8_long_piece_crosses_value_spans(shape, tiny_model_factory):
    """A piece longer than one span of widened V rows (256 positions for head size 32, 128 for 64): the
    chains carry across spans exactly."""
    n_embd, n_head, n_head_kv = SHAPES[shape]
    path = tiny_model_factory(n_layer=2, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128, seed=8)
    engine = Engine(path, n_ctx=384, n_threads=2, kv_type="q8_0")
    tokens = _prompt(12, 300)
    want_kv, want_logits = _one_by_one(engine, 0, tokens)
    for history, chunk in ((0, 300), (0, 37), (270, 512)):
        engine.truncate(0, history)
        engine.prefill(0, tokens[history:], chunk=chunk)
        kv, logits = _state(engine, 0)
        assert kv == want_kv, f"{shape}, history {history}, chunk {chunk}: KV differs"
        assert np.array_equal(logits, want_logits), f"{shape}, history {history}, chunk {chunk}: logits"
