"""Row-interleaved ("packed") Q6_K weights (quants-packed.h): every element rebuilt from the packed
block is gguf's value, prepared Q8_K activations carry the same numbers (with -32 * bsums for the
q - 32 offset), and the int32 steps hold at the extremes (a 16-element sum that is no int16). Round
trip, agreement with the scalar reference, the bitwise rule and padding:
test_kernels_packed_kquants.py, for Q4_K and Q6_K alike. Skipped in builds without packed products
(no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

NAME = "Q6_K"
TID = TYPE_IDS[NAME]
BLOCK = 3360           # packed bytes of 16 rows x one super-block (16 x 210: no growth)
ACT_BLOCK = 336        # prepared bytes of one Q8_K super-block

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q6_K products in this {K.simd_name()} build")


def test_packed_block_holds_the_gguf_values():
    """Rebuilding every element of group 0 / super-block 1 from the packed block alone (ql at
    [j][r], qh at [j][r], int8 scales [s][r], d) by llama.cpp's Q6_K formula gives gguf's values."""
    n = 512
    w, _ = checks.case(NAME, 16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]                          # super-block 1 of group 0
    ql = blk[:2048].reshape(32, 16, 4).transpose(1, 0, 2).reshape(16, 128).astype(np.int32)
    qh = blk[2048:3072].reshape(16, 16, 4).transpose(1, 0, 2).reshape(16, 64).astype(np.int32)
    sc = blk[3072:3328].view(np.int8).reshape(16, 16).T.astype(np.float32)   # (r, sub-block)
    d = blk[3328:3360].view("<f2").astype(np.float32)
    q = np.empty((16, 256), np.int32)
    for h in range(2):
        lo, hi, bits = ql[:, 64 * h:64 * h + 32], ql[:, 64 * h + 32:64 * h + 64], qh[:, 32 * h:32 * h + 32]
        q[:, 128 * h:128 * h + 32] = (lo & 15) | ((bits & 3) << 4)
        q[:, 128 * h + 32:128 * h + 64] = (hi & 15) | (((bits >> 2) & 3) << 4)
        q[:, 128 * h + 64:128 * h + 96] = (lo >> 4) | (((bits >> 4) & 3) << 4)
        q[:, 128 * h + 96:128 * h + 128] = (hi >> 4) | (((bits >> 6) & 3) << 4)
    got = d[:, None] * sc[:, np.arange(256) // 16] * (q - 32).astype(np.float32)
    want = true_values(NAME, w)[:, 256:512]
    assert np.allclose(got, want, rtol=1e-6, atol=0)


def test_prepared_activations_carry_q8k_numbers():
    """336 bytes a super-block: the Q8_K qs, int32 -32 * each bsum, its float d, 12 zero bytes."""
    checks.assert_prepared_with_offset_sums(NAME, ACT_BLOCK, 32)


@pytest.mark.parametrize("q, scale", [(0, -128), (63, 127), (0, 127)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int32_steps(q, scale, sign):
    """Every quant q, every scale `scale`, activations all +-127: a 16-element sum x (q - 32) is
    up to 16 * 32 * 127 = 65024 (no int16: a vpmaddwd-style step would wrap) and a super-block's
    scaled sum 16 * 65024 * 128; the packed product is the scalar one up to float rounding."""
    n = 512
    blk = np.zeros(210, np.uint8)
    blk[0:128] = (q & 15) * 0x11                        # ql: both nibbles q's low 4 bits
    blk[128:192] = (q >> 4) * 0x55                      # qh: all four 2-bit fields q's high bits
    blk[192:208] = np.array([scale], np.int8).view(np.uint8)[0]
    blk[208:210] = np.array([1.0], "<f2").view(np.uint8)
    got, ref = checks.constant_row_products(NAME, blk, n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * scale * (q - 32), rtol=1e-5)
