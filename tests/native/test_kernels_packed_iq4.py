"""Row-interleaved ("packed") IQ4_XS and IQ4_NL weights (quants-packed.h): every element rebuilt from the
packed block (nibbles at [j][r], IQ4_XS's 6-bit scales unpacked to int8, d) through the IQ4 table is
gguf's value, prepared activations carry the same numbers (IQ4_XS: Q8_K with -128 * the sums of 32;
IQ4_NL: Q8_0 with -128 * the block sum; both for the table looked up + 128), and the integer steps hold
at the extremes. Round trip, agreement with the scalar reference, the bitwise rule and padding:
test_kernels_packed_kquants.py (IQ4_XS), test_kernels_packed.py (IQ4_NL). Skipped in builds without
packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

IQ4NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)
XS = "IQ4_XS"
XS_BLOCK = 2208         # packed bytes of 16 rows x one super-block (16 x 136 + the scales unpacked: +1.5%)
XS_ACT_BLOCK = 320      # prepared bytes of one Q8_K super-block

needs_xs = pytest.mark.skipif(not K.packed_supported(TYPE_IDS[XS]),
                              reason=f"no packed IQ4_XS products in this {K.simd_name()} build")


@needs_xs
def test_iq4_xs_packed_block_holds_the_gguf_values():
    """Group 0 / super-block 1 rebuilt from the packed block alone: sub-block s's qs bytes 16s .. hold
    its elements l (low nibble) and l + 16 (high), each d * (ls - 32) * table[nibble]."""
    n = 512
    w, _ = checks.case(XS, 16, n, 1, 7)
    blk = K.pack_rows(TYPE_IDS[XS], w, n)[XS_BLOCK:2 * XS_BLOCK]
    qs = blk[:2048].reshape(32, 16, 4).transpose(1, 0, 2).reshape(16, 128)   # (r, GGUF qs byte)
    sc = blk[2048:2176].view(np.int8).reshape(8, 16).T.astype(np.float32)    # (r, sub-block)
    d = blk[2176:2208].view("<f2").astype(np.float32)
    q = np.empty((16, 256), np.int64)
    for s in range(8):
        q[:, 32 * s:32 * s + 16] = qs[:, 16 * s:16 * s + 16] & 15
        q[:, 32 * s + 16:32 * s + 32] = qs[:, 16 * s:16 * s + 16] >> 4
    got = d[:, None] * sc[:, np.arange(256) // 32] * IQ4NL_TABLE[q]
    assert np.allclose(got, true_values(XS, w)[:, 256:512], rtol=1e-6, atol=0)


@needs_xs
def test_iq4_xs_prepared_activations_carry_q8k_numbers():
    """320 bytes a super-block: the Q8_K qs, int32 -128 * each sum of 32 (pairs of bsums), float d, zeros."""
    src, dst = checks.prepared_q8k_blocks(XS, XS_ACT_BLOCK)
    assert np.array_equal(dst[:, :256], src[:, 4:260])
    sums = src[:, 260:292].copy().view("<i2").astype(np.int32).reshape(4, 8, 2).sum(axis=2)
    assert np.array_equal(dst[:, 256:288].copy().view("<i4"), -128 * sums)
    assert np.array_equal(dst[:, 288:292], src[:, 0:4])
    assert not dst[:, 292:].any()


def iq4_xs_constant_block(q: int, ls: int) -> np.ndarray:
    """One IQ4_XS super-block (136 GGUF bytes): every nibble q, every 6-bit scale ls, d = 1."""
    blk = np.zeros(136, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:4] = np.array([sum((ls >> 4) << (2 * j) for j in range(8))], "<u2").view(np.uint8)   # scales_h
    blk[4:8] = (ls & 15) * 0x11                                                               # scales_l
    blk[8:] = q * 0x11
    return blk


@needs_xs
@pytest.mark.parametrize("q, ls", [(0, 0), (0, 63), (15, 0), (15, 63), (8, 33)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_iq4_xs_extremes_fit_the_int32_steps(q, ls, sign):
    """Table value -127 or 113, scale -32 or 31, activations all +-127: a sub-block sum x t is up to
    32 * 127 * 127 (no int16) and its scaled sum 32 times that; the packed product is the scalar one up
    to float rounding."""
    n = 512
    got, ref = checks.constant_row_products(XS, iq4_xs_constant_block(q, ls), n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * (ls - 32) * IQ4NL_TABLE[q], rtol=1e-5)


NL = "IQ4_NL"
NL_BLOCK = 288          # packed bytes of 16 rows x one block of 32 (16 x 18: no growth)

needs_nl = pytest.mark.skipif(not K.packed_supported(TYPE_IDS[NL]),
                              reason=f"no packed IQ4_NL products in this {K.simd_name()} build")


@needs_nl
def test_iq4_nl_packed_block_holds_the_gguf_values():
    """Group 0 / block 1 rebuilt from the packed block alone: byte l of a row's 16 holds elements l (low
    nibble) and l + 16 (high), each d * table[nibble]."""
    n = 64
    w, _ = checks.case(NL, 16, n, 1, 5)
    blk = K.pack_rows(TYPE_IDS[NL], w, n)[NL_BLOCK:2 * NL_BLOCK]
    qs = blk[:256].reshape(4, 16, 4).transpose(1, 0, 2).reshape(16, 16)
    d = blk[256:288].view("<f2").astype(np.float32)
    q = np.concatenate([qs & 15, qs >> 4], axis=1)
    assert np.allclose(d[:, None] * IQ4NL_TABLE[q], true_values(NL, w)[:, 32:64], rtol=1e-6, atol=0)


@needs_nl
def test_iq4_nl_prepared_activations_carry_q8_0_numbers():
    """40 bytes a block: the Q8_0 qs, its scale widened to float, int32 -128 * the sum of its qs."""
    n = 64
    _, xq = checks.case(NL, 1, n, 2, 3)
    xp = K.prepare_act_packed(TYPE_IDS[NL], xq, n).reshape(4, 40)
    src = xq.reshape(4, 34)
    qs = src[:, 2:34].view(np.int8)
    assert np.array_equal(xp[:, :32], src[:, 2:34])
    assert np.array_equal(xp[:, 32:36].copy().view("<f4")[:, 0], src[:, 0:2].copy().view("<f2")[:, 0].astype(np.float32))
    assert np.array_equal(xp[:, 36:40].copy().view("<i4")[:, 0], -128 * qs.astype(np.int32).sum(axis=1))


@needs_nl
@pytest.mark.parametrize("q", [0, 7, 8, 15])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_iq4_nl_table_ends_are_exact(q, sign):
    """Every nibble q (table -127, -10, 1, 113), activations all +-127: the +128 lookup and the -128 *
    sum cancel exactly; the packed product is the scalar one up to float rounding."""
    tid, n = TYPE_IDS[NL], 64
    blk = np.zeros(18, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:] = q * 0x11
    w = np.tile(blk, (16, n // 32))
    xq = K.quantize_act_row(tid, np.full((1, n), sign, np.float32))
    pw, xp = checks.packed(NL, w, n, xq)
    got = K.matmul_packed(tid, pw, 16, xp, n)[0]
    ref = K.matvec_generic(tid, w, xq[0], n)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * IQ4NL_TABLE[q], rtol=1e-3)   # Q8_0's fp16 scale of 1 / 127
