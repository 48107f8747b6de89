"""The packed Q4_1 / Q8_0 / IQ4_NL products' floats, whatever the build's kernel file: each (token, row) is
the exact integer block sums run through the float steps quants-packed-avx512.cpp and
quants-packed-avx2.cpp both promise, in block order: acc = fma(float(dot_b), dw_b * dx_b, acc), then for
Q4_1 acc = fma(mw_b, s_b, acc) (dw, mw the weights' fp16 scales widened; dx, s the prepared activation
block's floats). Emulated here with exact rationals, each fma rounded once to float32 (via float64
rounded to odd, which then rounds to float32 as a single rounding would), so an AVX2 build and an
AVX-512 one that pass are bit for bit the same (the AVX2 file's claim, checkable on either machine)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from .kernel_data import TYPE_IDS, K, random_activations, random_weights

IQ4NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int64)

pytestmark = pytest.mark.skipif(not K.packed_supported(TYPE_IDS["Q4_1"]),
                                reason=f"no packed products in this {K.simd_name()} build")


def fma32(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """a * b + c rounded once to float32 (nearest, ties to even)."""
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    r = float(exact)
    if Fraction(r) != exact:   # round to odd: truncate toward zero, then an odd last bit
        if abs(Fraction(r)) > abs(exact):
            r = float(np.nextafter(r, 0.0))
        if np.array([r]).view(np.int64)[0] & 1 == 0:
            r = float(np.nextafter(r, np.copysign(np.inf, r)))
    return np.float32(r)


def weight_blocks(name: str, w: np.ndarray, n: int):
    """(d, m, q) of GGUF rows: (rows, blocks) float32 scales (m: Q4_1's minimums, else None) and
    (rows, blocks, 32) int64 quant values (Q4_1: nibbles; IQ4_NL: table values)."""
    rows, nb = w.shape[0], n // 32
    head = 4 if name == "Q4_1" else 2
    blk = w.reshape(rows, nb, -1)
    d = blk[..., 0:2].copy().view("<f2")[..., 0].astype(np.float32)
    m = blk[..., 2:4].copy().view("<f2")[..., 0].astype(np.float32) if name == "Q4_1" else None
    if name == "Q8_0":
        return d, m, blk[..., head:head + 32].view(np.int8).astype(np.int64)
    qs = blk[..., head:head + 16].astype(np.int64)
    q = np.concatenate([qs & 15, qs >> 4], axis=-1)   # elements j (low nibble), 16 + j (high)
    return d, m, IQ4NL_TABLE[q] if name == "IQ4_NL" else q


def emulated(name: str, w: np.ndarray, xp: np.ndarray, n: int) -> np.ndarray:
    """(n_tok, rows) float32: the promised float steps over prepared activations xp (n_tok, n / 32 * 40)."""
    d, m, q = weight_blocks(name, w, n)
    act = xp.reshape(xp.shape[0], n // 32, 40)
    xq = act[..., :32].view(np.int8).astype(np.int64)
    dx = act[..., 32:36].copy().view(np.float32)[..., 0]
    sx = act[..., 36:40].copy().view(np.float32)[..., 0]
    dots = np.einsum("rbk,tbk->trb", q, xq)   # exact integers
    out = np.zeros((xp.shape[0], w.shape[0]), np.float32)
    for t in range(out.shape[0]):
        for r in range(out.shape[1]):
            acc = np.float32(0)
            for b in range(n // 32):
                acc = fma32(np.float32(dots[t, r, b]), d[r, b] * dx[t, b], acc)
                if m is not None:
                    acc = fma32(m[r, b], sx[t, b], acc)
            out[t, r] = acc
    return out


@pytest.mark.parametrize("name", ["Q4_1", "Q8_0", "IQ4_NL"])
def test_packed_floats_are_the_promised_steps(name):
    """21 rows (a whole group and a masked half) x 3 tokens (one with a zero block) x 18 blocks."""
    tid, n, rows = TYPE_IDS[name], 576, 21
    rng = np.random.default_rng(300 + tid)
    w = random_weights(rng, name, rows, n)
    xp = K.prepare_act_packed(tid, K.quantize_act_row(tid, random_activations(rng, 3, n)), n)
    got = K.matmul_packed(tid, K.pack_rows(tid, w, n), rows, xp, n)
    want = emulated(name, w, xp, n)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.argwhere(got != want)[:5]
