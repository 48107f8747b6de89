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


def k_quant_blocks(name: str, w: np.ndarray, n: int):
    """(d, dmin, sc, m, q) of Q4_K / Q5_K / Q6_K GGUF rows: (rows, super-blocks) float32 d and dmin (Q6_K: dmin
    None), (rows, super-blocks, sub-blocks) int64 scales and mins (Q6_K: 16 int8 scales, mins None) and
    (rows, super-blocks, 256) int64 quants (Q6_K: q in [0, 63], the - 32 left to the activations' sums)."""
    rows, nb = w.shape[0], n // 256
    blk = w.reshape(rows, nb, -1)
    if name == "Q6_K":   # ql (128), qh (64), scales (16,) int8, d
        ql, qh = blk[..., :128].astype(np.int64), blk[..., 128:192].astype(np.int64)
        sc = blk[..., 192:208].view(np.int8).astype(np.int64)
        d = blk[..., 208:210].copy().view("<f2")[..., 0].astype(np.float32)
        q = np.zeros((rows, nb, 256), np.int64)
        for hf in range(2):
            lo, hi, h = ql[..., 64 * hf:64 * hf + 32], ql[..., 64 * hf + 32:64 * hf + 64], qh[..., 32 * hf:32 * hf + 32]
            for k, nib in enumerate((lo & 15, hi & 15, lo >> 4, hi >> 4)):   # elements 128 hf + 32 k + l
                q[..., 128 * hf + 32 * k:128 * hf + 32 * k + 32] = nib | (((h >> (2 * k)) & 3) << 4)
        return d, None, sc, None, q
    d = blk[..., 0:2].copy().view("<f2")[..., 0].astype(np.float32)
    dmin = blk[..., 2:4].copy().view("<f2")[..., 0].astype(np.float32)
    s12 = blk[..., 4:16].astype(np.int64)   # llama.cpp's get_scale_min_k4
    sc = np.concatenate([s12[..., 0:4] & 63, (s12[..., 8:12] & 15) | ((s12[..., 0:4] >> 6) << 4)], axis=-1)
    m = np.concatenate([s12[..., 4:8] & 63, (s12[..., 8:12] >> 4) | ((s12[..., 4:8] >> 6) << 4)], axis=-1)
    qs = blk[..., -128:].astype(np.int64)
    q = np.zeros((rows, nb, 256), np.int64)
    for p in range(4):   # bytes 32p ..: low nibbles elements 64p .., high 64p + 32 ..
        q[..., 64 * p:64 * p + 32] = qs[..., 32 * p:32 * p + 32] & 15
        q[..., 64 * p + 32:64 * p + 64] = qs[..., 32 * p:32 * p + 32] >> 4
    if name == "Q5_K":   # qh (32,) after the scales: bit s of byte l, element 32 s + l's fifth bit
        qh = blk[..., 16:48].astype(np.int64)
        for s in range(8):
            q[..., 32 * s:32 * s + 32] |= ((qh >> s) & 1) << 4
    return d, dmin, sc, m, q


def emulated_k_quant(name: str, w: np.ndarray, xp: np.ndarray, n: int) -> np.ndarray:
    """(n_tok, rows) float32: quants-packed-avx512.cpp's and -avx2.cpp's steps per super-block. Q4_K / Q5_K:
    isum = sum of scale * dot over the 8 sub-blocks, ms = sum of min * the activations' sub-block sum (exact
    integers), acc = fma(float(isum), d * dx, acc), then acc = fma(-float(ms), dmin * dx, acc) (fnmadd). Q6_K:
    isum = sum of scale * (dot + the activations' -32 * bsum) over its 16, acc = fma(float(isum), d * dx, acc)."""
    d, dmin, sc, m, q = k_quant_blocks(name, w, n)
    nb, q6 = n // 256, name == "Q6_K"
    act = xp.reshape(xp.shape[0], nb, -1)
    xq = act[..., :256].view(np.int8).astype(np.int64)
    if q6:
        off = act[..., 256:320].copy().view("<i4").astype(np.int64)   # (n_tok, nb, 16) -32 * bsums
        dx = act[..., 320:324].copy().view(np.float32)[..., 0]
        dots = np.einsum("rbsk,tbsk->trbs", q.reshape(*q.shape[:2], 16, 16), xq.reshape(*xq.shape[:2], 16, 16))
        isum = np.einsum("rbs,trbs->trb", sc, dots + off[:, None])
    else:
        sums = act[..., 260:276].copy().view("<i2").astype(np.int64)   # (n_tok, nb, 8) sub-block sums
        dx = act[..., 256:260].copy().view(np.float32)[..., 0]
        dots = np.einsum("rbsk,tbsk->trbs", q.reshape(*q.shape[:2], 8, 32), xq.reshape(*xq.shape[:2], 8, 32))
        isum = np.einsum("rbs,trbs->trb", sc, dots)
        ms = np.einsum("rbs,tbs->trb", m, sums)
    out = np.zeros((xp.shape[0], w.shape[0]), np.float32)
    for t in range(out.shape[0]):
        for r in range(out.shape[1]):
            acc = np.float32(0)
            for b in range(nb):
                acc = fma32(np.float32(isum[t, r, b]), d[r, b] * dx[t, b], acc)
                if not q6:
                    acc = fma32(-np.float32(ms[t, r, b]), dmin[r, b] * dx[t, b], acc)
            out[t, r] = acc
    return out


@pytest.mark.parametrize("name", ["Q4_K", "Q5_K", "Q6_K"])
def test_packed_k_quant_floats_are_the_promised_steps(name):
    """21 rows (a whole group and a masked half) x 3 tokens x 3 super-blocks: the AVX2 build's packed K-quant
    products are the AVX-512 VNNI build's floats bit for bit (both pass this)."""
    tid, n, rows = TYPE_IDS[name], 768, 21
    if not K.packed_supported(tid):
        pytest.skip(f"no packed {name} products in this {K.simd_name()} build")
    rng = np.random.default_rng(400 + tid)
    w = random_weights(rng, name, rows, n)
    xp = K.prepare_act_packed(tid, K.quantize_act_row(tid, random_activations(rng, 3, n)), n)
    got = K.matmul_packed(tid, K.pack_rows(tid, w, n), rows, xp, n)
    want = emulated_k_quant(name, w, xp, n)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), np.argwhere(got != want)[:5]
