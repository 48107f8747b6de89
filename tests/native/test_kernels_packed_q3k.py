"""Row-interleaved ("packed") Q3_K weights (quants-packed.h): every element rebuilt from the packed
block (qs and hmask at [j][r], the 6-bit scales unpacked to int8) is gguf's value, prepared Q8_K
activations carry the same numbers (with -4 * bsums for the q - 4 offset), and the int16 steps hold at
the extremes. Round trip, agreement with the scalar reference, the bitwise rule and padding:
test_kernels_packed_kquants.py, for every packed super-block type alike. Skipped in builds without
packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

NAME = "Q3_K"
TID = TYPE_IDS[NAME]
BLOCK = 1824           # packed bytes of 16 rows x one super-block (16 x 110 + the scales unpacked: +3.6%)
ACT_BLOCK = 336        # prepared bytes of one Q8_K super-block (Q6_K's layout)

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q3_K products in this {K.simd_name()} build")


def test_packed_block_holds_the_gguf_values():
    """Rebuilding every element of group 0 / super-block 1 from the packed block alone by llama.cpp's
    Q3_K formula (element 128h + 32g + k: two bits of qs[32h + k] at 2g, bit 4h + g of hmask[k])
    gives gguf's values."""
    n = 512
    w, _ = checks.case(NAME, 16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]                          # super-block 1 of group 0
    qs = blk[:1024].reshape(16, 16, 4).transpose(1, 0, 2).reshape(16, 64).astype(np.int32)
    hm = blk[1024:1536].reshape(8, 16, 4).transpose(1, 0, 2).reshape(16, 32).astype(np.int32)
    sc = blk[1536:1792].view(np.int8).reshape(16, 16).T.astype(np.float32)   # (r, sub-block)
    d = blk[1792:1824].view("<f2").astype(np.float32)
    q = np.empty((16, 256), np.int32)
    for h in range(2):
        for g in range(4):
            e = 128 * h + 32 * g
            q[:, e:e + 32] = ((qs[:, 32 * h:32 * h + 32] >> (2 * g)) & 3) | (((hm >> (4 * h + g)) & 1) << 2)
    got = d[:, None] * sc[:, np.arange(256) // 16] * (q - 4).astype(np.float32)
    want = true_values(NAME, w)[:, 256:512]
    assert np.allclose(got, want, rtol=1e-6, atol=0)


def test_prepared_activations_carry_q8k_numbers():
    """336 bytes a super-block: the Q8_K qs, int32 -4 * each bsum, its float d, 12 zero bytes."""
    checks.assert_prepared_with_offset_sums(NAME, ACT_BLOCK, 4)


def q3k_constant_block(q: int, scale: int) -> np.ndarray:
    """One Q3_K super-block (110 GGUF bytes) of quant q in [0, 7] and sub-block scale `scale` in
    [-32, 31] everywhere, d = 1."""
    blk = np.zeros(110, np.uint8)
    blk[0:32] = 0xFF if q >= 4 else 0                   # hmask: every high bit q's
    blk[32:96] = (q & 3) * 0x55                         # qs: all four 2-bit fields q's low bits
    v = scale + 32
    blk[96:104] = (v & 15) * 0x11                       # low 4 bits of scales 0-7 and 8-15
    blk[104:108] = (v >> 4) * 0x55                      # high 2 bits of all 16
    blk[108:110] = np.array([1.0], "<f2").view(np.uint8)
    return blk


@pytest.mark.parametrize("q, scale", [(0, -32), (0, 31), (7, 31), (3, -32)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int16_steps(q, scale, sign):
    """Every quant q, every scale `scale`, activations all +-127: a 16-element sum x (q - 4) is up to
    16 * 4 * 127 = 8128 (the vpdpwssd's int16 operand) and the product the scalar one up to float
    rounding (a scale read as unsigned, or a sum wrapped, would be far off)."""
    n = 512
    got, ref = checks.constant_row_products(NAME, q3k_constant_block(q, scale), n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=0), (got, ref)
    assert np.allclose(got, sign * n * scale * (q - 4), rtol=1e-5)
