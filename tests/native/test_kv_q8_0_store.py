"""The q8_0 KV store (kv-layout.cpp's quantize_block_q8_0, vectorized on AVX-512) writes exactly llama.cpp's
quantize_row_q8_0 bytes: d = fp16(amax / 127), q = round-half-even(x * (1 / d)) clamped to +-127, in float32,
for K (tiled, read back as rows) and V alike, on blocks made to hit the edges: exact ties after scaling, zeros
and signed zeros, subnormals, blocks whose d underflows to 0 or overflows fp16, one huge value among small
ones."""

from __future__ import annotations

import numpy as np
import pytest

from strata import _engine

K = _engine.kernels
Q8_0 = 8
HEAD_DIM = 64


def q8_0_bytes(rows: np.ndarray) -> np.ndarray:
    """(n, kv_dim) float32 -> (n, kv_dim / 32 * 34) uint8, as llama.cpp's quantize_row_q8_0_ref."""
    n, kv_dim = rows.shape
    blocks = rows.reshape(n, kv_dim // 32, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=2)
    with np.errstate(over="ignore"):   # d above fp16: inf, as llama.cpp stores it
        d = (amax / np.float32(127)).astype(np.float16)
    d32 = d.astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d32 != 0, np.float32(1) / d32, np.float32(0)).astype(np.float32)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(blocks * inv[..., None]), -127, 127).astype(np.int8)
    out = np.empty((n, kv_dim // 32, 34), dtype=np.uint8)
    out[..., :2] = d.view(np.uint8).reshape(n, kv_dim // 32, 2)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(n, -1)


def edge_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    rows = rng.standard_normal((n, HEAD_DIM)).astype(np.float32) * np.float32(3)
    for i in range(n):
        block = rows[i, :32]
        kind = i % 8
        if kind == 1:     # every value a tie: k + 0.5 steps of d = 1 (amax 127)
            block[:] = rng.integers(-126, 126, 32) + np.float32(0.5)
            block[0] = 127
        elif kind == 2:   # zeros and signed zeros among values
            block[::3] = 0.0
            block[1::3] = -0.0
        elif kind == 3:   # subnormal floats only: d underflows fp16 to 0, every q 0
            block[:] = rng.standard_normal(32).astype(np.float32) * np.float32(1e-40)
        elif kind == 4:   # amax / 127 above fp16's range: d is inf, every q 0
            block[:] = rng.standard_normal(32).astype(np.float32) * np.float32(1e7)
        elif kind == 5:   # one huge value among small ones
            block[:] = rng.standard_normal(32).astype(np.float32) * np.float32(1e-3)
            block[7] = np.float32(-4e4)
        elif kind == 6:   # all zeros
            block[:] = 0.0
        elif kind == 7:   # scaled ties around a non-power-of-two d
            block[:] = (rng.integers(-60, 60, 32) + np.float32(0.5)) * np.float32(0.37)
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_q8_0_store_writes_llama_cpp_blocks(seed):
    rng = np.random.default_rng(seed)
    k = edge_rows(rng, 40)
    v = edge_rows(rng, 40)[::-1].copy()
    kb, vb = K.kv_pack(Q8_0, 1, HEAD_DIM, k, v)
    got_k = np.asarray(K.kv_rows(Q8_0, 1, HEAD_DIM, kb, True, 0, len(k)))
    got_v = np.asarray(K.kv_rows(Q8_0, 1, HEAD_DIM, vb, False, 0, len(v)))
    for what, got, rows in (("K", got_k, k), ("V", got_v, v)):
        want = q8_0_bytes(rows)
        bad = np.nonzero((got != want).any(axis=1))[0]
        assert bad.size == 0, f"{what}: rows {bad[:5].tolist()} differ from llama.cpp's q8_0 blocks"
