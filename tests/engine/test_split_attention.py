"""Attention of long lone rows in parts (forward.cpp's split_pays / attention_parts: scores by tile
ranges, the softmax per query head, the values by 32 dimensions, so that both threads share one long
row's few kv heads) against the whole-row path, byte for byte: one thread (never split), the row in
a batch that balances without parts, and the prompt read as one chunk.

Covers head sizes 32, 64 and 128, 1-4 query heads per kv head, histories past the 1,024 positions
where parts begin (with a partial last tile), and an uneven batch of three long rows.

Not here: speed (benchmarks/RESULTS.md, "Long-history decode").
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

# (n_embd, n_head, n_head_kv): head size, query heads per kv head; 1 or 3 kv heads, so that one row's
# kv heads do not balance two threads (2 would: no parts)
SHAPES = {
    "hd32-rep2-kv3": (192, 6, 3),
    "hd64-rep3-kv1": (192, 3, 1),
    "hd64-rep3-kv3": (576, 9, 3),      # the default model's attention
    "hd128-rep2-kv1": (256, 2, 1),
    "hd32-rep4-kv3": (384, 12, 3),
    "hd64-rep1-kv3": (192, 3, 3),
}
HISTORY = 1100          # > 1,024 positions, not a whole number of 16-position tiles
STEPS = 3


def _tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(1, 500, size=n)]


def _decode_alone(path, tokens: list[int], threads: int) -> tuple[list[np.ndarray], bytes]:
    engine = Engine(path, n_ctx=HISTORY + 64, n_threads=threads)
    engine.prefill(0, tokens[:HISTORY])
    out = [engine.decode([0], [t])[0].copy() for t in tokens[HISTORY:HISTORY + STEPS]]
    return out, engine.kv_read(0, 0, engine.context_len(0))


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_long_lone_row_is_the_same_in_parts(shape, tiny_model_factory):
    n_embd, n_head, n_head_kv = SHAPES[shape]
    path = tiny_model_factory(n_layer=2, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv, n_ff=128, seed=3,
                              ctx_len=2048)
    tokens = _tokens(len(shape), HISTORY + STEPS)
    whole, whole_kv = _decode_alone(path, tokens, threads=1)       # one thread: never in parts
    parts, parts_kv = _decode_alone(path, tokens, threads=2)       # one row, its kv heads over 2 threads
    for step, (a, b) in enumerate(zip(whole, parts, strict=True)):
        assert np.array_equal(a, b), f"{shape}: decode step {step} differs in parts"
    assert whole_kv == parts_kv, f"{shape}: the KV written after the parts differs"

    # a twin of the same length beside it: two rows balance two threads, so no parts
    engine = Engine(path, n_ctx=HISTORY + 64, n_slots=1, slot_ctx=HISTORY + 64, n_threads=2)
    for ctx in (0, 1):
        engine.prefill(ctx, tokens[:HISTORY])
    for step, t in enumerate(tokens[HISTORY:HISTORY + STEPS]):
        both = engine.decode([0, 1], [t, t])
        assert np.array_equal(both[0], parts[step]) and np.array_equal(both[1], parts[step]), (shape, step)

    # the prompt read in one chunk (grouped or per-row prefill) ends in the same logits
    engine = Engine(path, n_ctx=HISTORY + 64, n_threads=2)
    engine.prefill(0, tokens[:HISTORY + STEPS])
    assert np.array_equal(engine.logits(0), parts[-1]), f"{shape}: prefill and decode in parts differ"


def test_an_uneven_batch_of_long_rows_is_the_same_in_parts(tiny_model_factory):
    path = tiny_model_factory(n_layer=2, n_embd=192, n_head=3, n_head_kv=1, n_ff=128, seed=4, ctx_len=2048)
    lengths = {1: HISTORY, 2: HISTORY - 50, 3: HISTORY - 71}     # three whole rows on two threads: in parts
    prompts = {ctx: _tokens(ctx, n + 1) for ctx, n in lengths.items()}
    engine = Engine(path, n_ctx=64, n_slots=3, slot_ctx=HISTORY + 64, n_threads=2)
    for ctx, n in lengths.items():
        engine.prefill(ctx, prompts[ctx][:n])
    batched = engine.decode(list(lengths), [prompts[ctx][-1] for ctx in lengths])
    alone = Engine(path, n_ctx=64, n_slots=3, slot_ctx=HISTORY + 64, n_threads=1)
    for i, (ctx, n) in enumerate(lengths.items()):
        alone.prefill(ctx, prompts[ctx][:n])
        assert np.array_equal(alone.decode([ctx], [prompts[ctx][-1]])[0], batched[i]), f"row of {n} positions"
