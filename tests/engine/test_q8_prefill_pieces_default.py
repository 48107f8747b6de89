"""The default model (SmolLM2-135M: head size 64, 3 query heads per kv head) with kv_type="q8_0": a prompt
of 1,100 tokens read whole in pieces of 512 (attention_row_group's q8_0 prompt kernels: groups of 8 rows,
K spans of 8 tiles and V spans of 128 rows crossed many times) against the same prompt read after a
history in pieces of 7 and of 1 (the per-row path at the end), byte for byte: every layer's KV and the last
logits, on 1 and 2 threads. The tiny models of test_grouped_attention_q8.py cover the shapes; this is the
real model's weights at depth (the history ends inside a K tile: 601 = 37 x 16 + 9).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

N_TOKENS = 1100


def _state(engine: Engine) -> tuple[bytes, np.ndarray]:
    return engine.kv_read(0, 0, engine.context_len(0)), engine.logits(0)


@pytest.mark.parametrize("threads", [1, 2])
def test_default_model_q8_prompt_pieces_equal_whole(default_model_path, threads):
    tokens = [int(t) for t in np.random.default_rng(35).integers(100, 40000, size=N_TOKENS)]
    engine = Engine(default_model_path, n_ctx=2048, n_threads=threads, kv_type="q8_0")
    engine.prefill(0, tokens, chunk=512)
    want_kv, want_logits = _state(engine)
    for history, chunk in ((601, 7), (1060, 1), (0, 333)):
        engine.truncate(0, 0)
        engine.prefill(0, tokens[:history], chunk=512)
        engine.prefill(0, tokens[history:], chunk=chunk)
        kv, logits = _state(engine)
        assert kv == want_kv, f"history {history}, pieces of {chunk}: KV differs"
        assert np.array_equal(logits, want_logits), f"history {history}, pieces of {chunk}: logits differ"
