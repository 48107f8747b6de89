"""Edges of the packed Q4_K / Q5_K / Q6_K products that the random tests reach only by chance (review of
the AVX2 kernels, quants-packed-avx2.cpp; the AVX-512 ones answer the same): the int16 sums at their
design bound (activation bytes of -128, which the kernels budget for, against the largest quants and
scales), the Q8_K quantizer giving -128 only where the block adds nothing, and the bitwise rule under
every way of splitting one product between threads (row ranges from group boundaries ending at every
row) and token tiles (every tile size 1..8 and chunks of the tokens), at k = 768 (super-blocks not a
multiple of 2). Skipped per type in builds without its packed products."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K

F16_ONE = np.array([1.0], "<f2").view(np.uint8)


def q8k_row(q: int, n: int) -> np.ndarray:
    """(1, n / 256 * 292) Q8_K bytes: d = 1.0, every quant q, the bsums 16 q (what the engine's
    quantizer writes for such a block, -128 included: see the quantizer test below)."""
    blk = np.concatenate([np.array([1.0], "<f4").view(np.uint8), np.full(256, q, np.int8).view(np.uint8),
                          np.full(16, 16 * q, "<i2").view(np.uint8)])
    return np.tile(blk, n // 256)[None, :]


def weight_block(name: str, q: int, scale: int) -> np.ndarray:
    """One GGUF super-block: d = 1.0, dmin = 0 (Q4_K / Q5_K), every quant q and every scale `scale`."""
    if name == "Q6_K":
        blk = np.zeros(210, np.uint8)
        blk[0:128] = (q & 15) * 0x11                    # ql: both nibbles q's low 4 bits
        blk[128:192] = (q >> 4) * 0x55                  # qh: all four 2-bit fields q's high bits
        blk[192:208] = np.array([scale], np.int8).view(np.uint8)[0]
        blk[208:210] = F16_ONE
        return blk
    assert scale == 63
    blk = np.zeros(144 if name == "Q4_K" else 176, np.uint8)
    blk[0:2] = F16_ONE
    blk[4:16] = 0xFF                                    # every 6-bit scale and min 63 (dmin 0: mins add 0)
    if name == "Q4_K":
        blk[16:] = (q & 15) * 0x11
    else:
        blk[16:48] = 0xFF if q >> 4 else 0              # every fifth bit
        blk[48:] = (q & 15) * 0x11
    return blk


def skip_unpacked(name: str, *values):
    return pytest.param(name, *values, marks=pytest.mark.skipif(
        not K.packed_supported(TYPE_IDS[name]), reason=f"no packed {name} products in this {K.simd_name()} build"))


@pytest.mark.parametrize("name, q, scale", [
    skip_unpacked("Q4_K", 15, 63),          # 8 maddubs added in int16: 16 x 15 x -128 = -30720
    skip_unpacked("Q5_K", 31, 63),          # 4 maddubs: 8 x 31 x -128 = -31744
    skip_unpacked("Q6_K", 63, 127),         # 2 maddubs: 4 x 63 x -128 = -32256
    skip_unpacked("Q6_K", 63, -128),
    skip_unpacked("Q6_K", 0, 127),          # q - 32 = -32: only the -32 * bsum term
])
@pytest.mark.parametrize("x", [-128, 127])
def test_int16_sums_exact_at_the_bound(name, q, scale, x):
    """Every activation byte -128 (or 127), the largest quants and scales, every d 1.0: the product is
    an exact integer in float32, so an int16 partial that wrapped or saturated (a maddubs more in a
    sum, a wrong bound) would show as a wrong integer. 2 super-blocks, 72 rows: one token walks the 4 whole
    groups as two streams (packed_tile_streams_K, session 38: its own pass over the block bodies) and the
    fifth's first half through the one-group tile, its second half masked. 24 rows (no whole-group pair)
    left the streams' sums unchecked at the bound."""
    tid, n, rows = TYPE_IDS[name], 512, 72
    w = np.tile(weight_block(name, q, scale), (rows, n // 256))
    xq = q8k_row(x, n)
    got = K.matmul_packed(tid, K.pack_rows(tid, w, n), rows, K.prepare_act_packed(tid, xq, n), n)[0]
    w_value = (q - 32) * scale if name == "Q6_K" else q * scale
    exact = np.float32(n * w_value * x)
    assert (got == exact).all(), (got, exact)
    assert (K.matvec_generic(tid, w, xq[0], n) == exact).all()


def test_q8k_quantizer_gives_minus_128_only_where_the_block_adds_nothing():
    """Random finite rows over scales from 1e30 down to subnormal (each block's largest magnitude once
    negative, once positive): a Q8_K quant of -128 appears only in blocks whose d is 0 (the largest
    magnitude so small that -127 / max overflows), so a block that counts stays within +-127. Rows
    holding inf or NaN give -128 too (NaN's conversion; with a finite d where the block has no inf):
    such a row is garbage whatever the kernels do, and test_int16_sums_exact_at_the_bound holds them to
    -128 anyway."""
    tid = TYPE_IDS["Q4_K"]
    rng = np.random.default_rng(37)
    rows = []
    with np.errstate(over="ignore"):
        for scale in (1e30, 1e6, 1.0, 1e-3, 1e-30, 1e-37, 1e-38, 1e-40, 1e-44):
            x = (rng.standard_normal(256 * 8) * scale).astype(np.float32)
            for sign in (1.0, -1.0):
                y = x.copy().reshape(-1, 256)
                y[:, 5] = sign * np.abs(y).max(1) * 1.5
                rows.append(y.reshape(-1))
    xq = K.quantize_act_row(tid, np.stack(rows)).reshape(len(rows), -1, 292)
    d = xq[..., :4].copy().view("<f4")[..., 0]
    minus_128 = (xq[..., 4:260].view(np.int8) == -128).any(-1)
    assert (minus_128 & (d == 0)).any()   # the scales reach the case
    assert not (minus_128 & (d != 0)).any()
    assert np.isfinite(d).all()


def split_product(tid: int, pw: np.ndarray, n_rows: int, xp: np.ndarray, n: int, row_cuts: list[int],
                  tok_cuts: list[int]) -> np.ndarray:
    """The product computed in pieces, as threads would split it: row ranges [row_cuts[i], row_cuts[i+1])
    (each starting at a group boundary) x token chunks [tok_cuts[j], tok_cuts[j+1]), stitched."""
    out = np.full((xp.shape[0], n_rows), np.nan, np.float32)
    for r0, r1 in zip(row_cuts[:-1], row_cuts[1:], strict=True):
        for t0, t1 in zip(tok_cuts[:-1], tok_cuts[1:], strict=True):
            out[t0:t1, r0:r1] = K.matmul_packed(tid, pw, n_rows, xp[t0:t1], n, r0, r1)
    return out


@pytest.mark.parametrize("name", [skip_unpacked(n) for n in ("Q4_K", "Q5_K", "Q6_K")])
def test_bitwise_whatever_the_split(name):
    """53 rows (a last group of 5: half 0 masked, half 1 all padding), 19 tokens, k = 768: every split of
    the rows at group boundaries and of the tokens into chunks (tiles of 1..8 tokens and remainders)
    gives the same floats as each token alone over all rows; every row range [16 g, r1) for every r1
    up to 53 (ends inside either half, at a half's end, at a group's end) too."""
    tid, n, n_rows, n_tok = TYPE_IDS[name], 768, 53, 19
    w, xq = checks.case(name, n_rows, n, n_tok, 3737)
    pw, xp = checks.packed(name, w, n, xq)
    alone = np.stack([K.matmul_packed(tid, pw, n_rows, xp[t:t + 1], n)[0] for t in range(n_tok)])
    assert np.isfinite(alone).all()
    for row_cuts in ([0, 53], [0, 16, 53], [0, 16, 32, 48, 53], [0, 32, 53], [0, 48, 53]):
        for tok_cuts in ([0, 19], [0, 1, 19], [0, 8, 16, 19], [0, 3, 10, 19], [0, 7, 14, 19],
                         list(range(20)), [0, 2, 4, 6, 11, 19], [0, 9, 18, 19], [0, 5, 10, 15, 19]):
            got = split_product(tid, pw, n_rows, xp, n, row_cuts, tok_cuts)
            assert np.array_equal(got, alone), (name, row_cuts, tok_cuts)
    for g in range(4):
        for r1 in range(16 * g + 1, n_rows + 1):
            for nt in (1, 4, 8, 9, 19):
                got = K.matmul_packed(tid, pw, n_rows, xp[:nt], n, 16 * g, r1)
                assert np.array_equal(got, alone[:nt, 16 * g:r1]), (name, g, r1, nt)
