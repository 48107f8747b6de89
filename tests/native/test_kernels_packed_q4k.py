"""Row-interleaved ("packed") Q4_K weights (quants-packed.h): the packed block unpacks the 6-bit
scales / mins to the values gguf reads, prepared Q8_K activations carry the same numbers, and the
int16 steps hold at the extremes. Round trip, agreement with the scalar reference, the bitwise rule
and padding: test_kernels_packed_kquants.py, for Q4_K and Q6_K alike. Skipped in builds without
packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

NAME = "Q4_K"
TID = TYPE_IDS[NAME]
BLOCK = 2368           # packed bytes of 16 rows x one super-block
ACT_BLOCK = 288        # prepared bytes of one Q8_K super-block

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q4_K products in this {K.simd_name()} build")


def test_packed_block_holds_the_gguf_values():
    """Rebuilding every element of group 0 / super-block 1 from the packed block alone (nibbles at
    [j][r], d, dmin, byte scales [s][r], byte mins [k][r][2]) gives gguf's dequantized values."""
    n = 512
    w, _ = checks.case(NAME, 16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]                        # super-block 1 of group 0
    got = checks.q45k_values_from_packed(blk)
    want = true_values("Q4_K", w)[:, 256:512]
    assert np.allclose(got, want, rtol=1e-6, atol=0)


def test_prepared_activations_carry_q8k_numbers():
    """288 bytes a super-block: the Q8_K qs, its float d, the int16 sums of 32 (pairs of bsums)."""
    src, dst = checks.prepared_q8k_blocks(NAME, ACT_BLOCK)
    assert np.array_equal(dst[:, :256], src[:, 4:260])
    assert np.array_equal(dst[:, 256:260], src[:, 0:4])
    bsums = src[:, 260:292].copy().view("<i2").reshape(4, 8, 2).sum(axis=2)
    assert np.array_equal(dst[:, 260:276].copy().view("<i2"), bsums)
    assert not dst[:, 276:].any()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int16_steps(sign):
    """Every quant 15, every scale and min 63, activations all +-127: each 16-element sum is
    +-30480 (the vpdpwssd's int16 operand) and each sub-block sum +-4064; the packed product is
    the scalar one up to float rounding (a wrapped int16 would be off by 65536 * 63 * d)."""
    n = 512
    blk = np.zeros(144, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:4] = np.array([0.5], "<f2").view(np.uint8)
    blk[4:16] = 0xFF                                   # all 6-bit scales and mins 63
    blk[16:] = 0xFF                                    # all quants 15
    got, ref = checks.constant_row_products(NAME, blk, n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * (63 * 15 - 0.5 * 63), rtol=1e-5)
