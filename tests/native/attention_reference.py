"""NumPy reference of the attention kernels (attention.h) with a sliding window and sinks, and a small
KV fixture built through the kernel binding (kv_pack), for the tests in this folder.

The reference reads K and V back as the kernels stored them (kv_rows: fp16 / f32 / q8_0 blocks) and,
for q8_0, quantizes the query to q8_0 as the kernels do (d = amax / 127 in f32, q = round(x / d)), so
it differs from the kernels only by float rounding. Not a model of llama.cpp's kernels; the semantics
are llama.cpp's (LLAMA_SWA_TYPE_STANDARD, ggml soft_max with sinks).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata import _engine

K = _engine.kernels

F32, F16, Q8_0 = 0, 1, 8
TYPE_NAMES = {F32: "f32", F16: "f16", Q8_0: "q8_0"}


@dataclass(frozen=True)
class kv_case:
    """One layer's KV of n positions: k_buf / v_buf in the kernels' layout, k / v (n, kv_dim) float64
    as stored (what the kernels read)."""
    kv_type: int
    n_head_kv: int
    head_dim: int
    k_buf: np.ndarray
    v_buf: np.ndarray
    k: np.ndarray
    v: np.ndarray

    def layout(self) -> tuple[int, int, int]:
        return self.kv_type, self.n_head_kv, self.head_dim


def _stored(kv_type: int, rows: np.ndarray, kv_dim: int) -> np.ndarray:
    if kv_type == F32:
        return rows.view(np.float32).astype(np.float64)
    if kv_type == F16:
        return rows.view(np.float16).astype(np.float64)
    return np.stack([K.dequantize_row(Q8_0, r, kv_dim) for r in rows]).astype(np.float64)


def make_kv(rng: np.random.Generator, kv_type: int, n_head_kv: int, head_dim: int, n: int,
            capacity: int | None = None) -> kv_case:
    kv_dim = n_head_kv * head_dim
    k = rng.standard_normal((n, kv_dim)).astype(np.float32)
    v = rng.standard_normal((n, kv_dim)).astype(np.float32)
    k_buf, v_buf = K.kv_pack(kv_type, n_head_kv, head_dim, k, v, capacity)
    k_st = _stored(kv_type, K.kv_rows(kv_type, n_head_kv, head_dim, k_buf, True, 0, n), kv_dim)
    v_st = _stored(kv_type, K.kv_rows(kv_type, n_head_kv, head_dim, v_buf, False, 0, n), kv_dim)
    return kv_case(kv_type, n_head_kv, head_dim, k_buf, v_buf, k_st, v_st)


def query_as_read(kv_type: int, q: np.ndarray) -> np.ndarray:
    """The query as the kernels use it: q8_0 KV quantizes it by blocks of 32 (not rounding d to fp16)."""
    if kv_type != Q8_0:
        return q.astype(np.float64)
    blocks = q.astype(np.float32).reshape(*q.shape[:-1], -1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127.0)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, 1), np.float32(0.0)).astype(np.float32)
    qs = np.rint(blocks * inv)
    return (qs.astype(np.float64) * d.astype(np.float64)).reshape(q.shape)


def window_start(n_pos: int, window: int) -> int:
    return n_pos - window if 0 < window < n_pos else 0


def reference(case: kv_case, q: np.ndarray, g: int, n_pos: int, scale: float, window: int = 0,
              sinks: np.ndarray | None = None) -> np.ndarray:
    """(n_rep, head_dim) float64: softmax over positions [window_start, n_pos) of kv head g, a sink
    logit per query head in the denominator only (ggml soft_max with sinks)."""
    hd = case.head_dim
    w0 = window_start(n_pos, window)
    kh = case.k[w0:n_pos, g * hd:(g + 1) * hd]
    vh = case.v[w0:n_pos, g * hd:(g + 1) * hd]
    qh = query_as_read(case.kv_type, q)
    s = (qh @ kh.T) * np.float64(np.float32(scale))                       # (n_rep, n_vis)
    sink = np.full(q.shape[0], -np.inf) if sinks is None else sinks.astype(np.float64)
    m = np.maximum(s.max(axis=1), sink)
    p = np.exp(s - m[:, None])
    denom = p.sum(axis=1) + np.exp(sink - m)
    return (p @ vh) / denom[:, None]
