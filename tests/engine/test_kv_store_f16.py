"""kv_store's f16 conversion (8 values at a time with F16C, scattered into K tiles): the bytes the
scalar fp32_to_fp16 gives, i.e. IEEE round-to-nearest-even, the same as NumPy's float16.

Layer 0's K and V depend on no attention, so an f32-KV engine's layer-0 rows converted by NumPy must
be byte for byte an f16-KV engine's (kv_read: rows whatever the layout). Shapes: tiled K (head size
64) and the rows layout with a kv_dim that is not a multiple of 8 (head size 18: the scalar tail).

Not here: the q8_0 cache (test_kv_q8_0.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from strata.engine import Engine

SHAPES = {"tiled-hd64": (192, 3, 1), "rows-hd18": (72, 4, 2)}   # (n_embd, n_head, n_head_kv)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_f16_rows_are_numpy_float16_of_the_f32_rows(shape, tiny_model_factory):
    n_embd, n_head, n_head_kv = SHAPES[shape]
    path = tiny_model_factory(dtype="F32", seed=12, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv)
    tokens = [int(t) for t in np.random.default_rng(1).integers(3, 500, size=37)]
    rows = {}
    for kv in ("f32", "f16"):
        e = Engine(path, n_ctx=64, n_threads=2, kv_type=kv)
        e.prefill(0, tokens, chunk=11)
        kv_dim = n_head_kv * (n_embd // n_head)
        dtype = np.float32 if kv == "f32" else np.float16
        all_rows = np.frombuffer(e.kv_read(0, 0, len(tokens)), dtype=dtype)
        rows[kv] = all_rows.reshape(e.n_layer, 2, len(tokens), kv_dim)[0]   # layer 0's K and V
    want = rows["f32"].astype(np.float16)
    assert want.tobytes() == rows["f16"].tobytes()
    assert np.abs(rows["f32"]).max() > 0.1   # real values, not zeros
