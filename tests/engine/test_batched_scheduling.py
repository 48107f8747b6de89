"""How the forward shares a batched step among threads must not change a bit of any row's logits:
the products' row chunks go to the threads as contiguous runs (a thread done with its own takes
chunks from the back of the others'), and attention tasks are whole rows when no row is longer than
a thread's fair share of all positions, one (row, kv head) otherwise. Compared with np.array_equal
against one-row decodes on one thread, for 1-4 threads (more threads than a tiny model's chunks, so
empty runs and taking from others happen) and for rows of equal and of very unequal lengths.

Not here: batching vs chunking in general (test_bitwise.py) or speed (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

from tests.fixtures.tiny_gguf import K_QUANT_SHAPE

NEXT = [77, 78, 79]
EQUAL = {1: list(range(3, 23)), 2: list(range(40, 60)), 3: list(range(100, 120)), 4: list(range(200, 220))}
UNEQUAL = {1: list(range(3, 60)), 2: [5, 6], 3: [7], 4: [300, 301, 302]}   # one row > half of all positions


@pytest.fixture(scope="module")
def model(tiny_model_factory):
    return tiny_model_factory(dtype="Q4_1", seed=5)


def one_row_decodes(path, prompts: dict[int, list[int]], kv_type: str = "f16") -> dict[int, list[np.ndarray]]:
    e = Engine(path, n_ctx=128, n_slots=4, n_threads=1, kv_type=kv_type)
    out = {}
    for ctx, p in prompts.items():
        e.prefill(ctx, p)
        out[ctx] = [e.decode([ctx], [t])[0] for t in NEXT]
    return out


def assert_batched_steps_equal(path, prompts: dict[int, list[int]], thread_counts, kv_type: str = "f16") -> None:
    """Every row of every batched step equals its one-row decode on one thread, bit for bit."""
    expected = one_row_decodes(path, prompts, kv_type)
    for n_threads in thread_counts:
        e = Engine(path, n_ctx=128, n_slots=4, n_threads=n_threads, kv_type=kv_type)
        for ctx, p in prompts.items():
            e.prefill(ctx, p)
        order = list(prompts)
        for step, t in enumerate(NEXT):
            rows = e.decode(order, [t] * len(order))
            for row, ctx in enumerate(order):
                assert np.array_equal(rows[row], expected[ctx][step]), f"{n_threads} threads, ctx {ctx}, step {step}"


@pytest.mark.parametrize("prompts", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_batched_step_is_the_same_whatever_the_threads(model, prompts):
    assert_batched_steps_equal(model, prompts, (1, 2, 3, 4))


@pytest.mark.parametrize("prompts", [EQUAL, UNEQUAL], ids=["equal", "unequal"])
def test_q8_0_kv_batched_step_is_the_same_whatever_the_threads(tiny_model_factory, prompts):
    # q8_0 KV has its own attention (blocks widened once per position for all query heads of a group)
    path = tiny_model_factory(dtype="Q4_1", seed=6, **K_QUANT_SHAPE)   # head size 64: whole q8_0 blocks
    assert_batched_steps_equal(path, prompts, (1, 2, 3), kv_type="q8_0")
