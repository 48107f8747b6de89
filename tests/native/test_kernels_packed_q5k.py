"""Row-interleaved ("packed") Q5_K weights (quants-packed.h): the packed block (Q4_K's parts, then
qh) gives the values gguf reads, prepared activations are Q4_K's, and the int16 steps hold at the
extremes (8-element sums: a 16-element one would not fit). Round trip, agreement with the scalar
reference, the bitwise rule and padding: test_kernels_packed_kquants.py, for every packed K-quant.
Skipped in builds without packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

NAME = "Q5_K"
TID = TYPE_IDS[NAME]
BLOCK = 2880           # packed bytes of 16 rows x one super-block (+2.3% over 16 x 176)

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q5_K products in this {K.simd_name()} build")


def test_packed_block_holds_the_gguf_values():
    """Every element of group 0 / super-block 1 rebuilt from the packed block alone is gguf's value."""
    n = 512
    w, _ = checks.case(NAME, 16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]
    assert np.allclose(checks.q45k_values_from_packed(blk), true_values(NAME, w)[:, 256:512], rtol=1e-6, atol=0)


def test_prepared_activations_are_q4k_ones():
    """Q5_K's products read Q8_K activations prepared as Q4_K's (qs, d, sums of 32)."""
    _, xq = checks.case(NAME, 1, 512, 3, 5)
    assert np.array_equal(K.prepare_act_packed(TID, xq, 512), K.prepare_act_packed(TYPE_IDS["Q4_K"], xq, 512))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int16_steps(sign):
    """Every quant 31, every scale and min 63, activations all +-127: each 8-element sum is +-31496
    (the vpdpwssd's int16 operand; 16 elements would be 62992, which wraps); the packed product
    is the scalar one up to float rounding."""
    n = 512
    blk = np.zeros(176, np.uint8)
    blk[0:2] = np.array([1.0], "<f2").view(np.uint8)
    blk[2:4] = np.array([0.5], "<f2").view(np.uint8)
    blk[4:16] = 0xFF                                   # all 6-bit scales and mins 63
    blk[16:] = 0xFF                                    # all fifth bits set, all nibbles 15: q = 31
    got, ref = checks.constant_row_products(NAME, blk, n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * (63 * 31 - 0.5 * 63), rtol=1e-5)
