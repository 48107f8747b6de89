"""Row-interleaved ("packed") Q2_K weights (quants-packed.h): every element rebuilt from the packed block
(qs at [j][r], the scale bytes in pairs at [k][r], d, dmin) is gguf's value, prepared Q8_K activations
carry the same numbers (qs, the int16 bsums, d), and the int16 steps hold at the extremes. Round trip,
agreement with the scalar reference, the bitwise rule and padding: test_kernels_packed_kquants.py.
Skipped in builds without packed products (no AVX-512 VNNI)."""

from __future__ import annotations

import numpy as np
import pytest

from . import packed_checks as checks
from .kernel_data import TYPE_IDS, K, true_values

NAME = "Q2_K"
TID = TYPE_IDS[NAME]
BLOCK = 1344           # packed bytes of 16 rows x one super-block (16 x 84: no growth)
ACT_BLOCK = 320        # prepared bytes of one Q8_K super-block

pytestmark = pytest.mark.skipif(not K.packed_supported(TID),
                                reason=f"no packed Q2_K products in this {K.simd_name()} build")


def test_packed_block_holds_the_gguf_values():
    """Group 0 / super-block 1 rebuilt from the packed block alone by llama.cpp's Q2_K formula (element
    128h + 32g + k: two bits of qs[32h + k] at 2g; sub-block j: d * (scales[j] & 15) * q - dmin *
    (scales[j] >> 4)) gives gguf's values."""
    n = 512
    w, _ = checks.case(NAME, 16, n, 1, 7)
    blk = K.pack_rows(TID, w, n)[BLOCK:2 * BLOCK]                           # super-block 1 of group 0
    qs = blk[:1024].reshape(16, 16, 4).transpose(1, 0, 2).reshape(16, 64).astype(np.int32)
    sc = blk[1024:1280].reshape(8, 16, 2).transpose(1, 0, 2).reshape(16, 16).astype(np.int32)   # (r, sub-block)
    d = blk[1280:1312].view("<f2").astype(np.float32)
    dmin = blk[1312:1344].view("<f2").astype(np.float32)
    q = np.empty((16, 256), np.int32)
    for h in range(2):
        for g in range(4):
            q[:, 128 * h + 32 * g:128 * h + 32 * g + 32] = (qs[:, 32 * h:32 * h + 32] >> (2 * g)) & 3
    sub = np.arange(256) // 16
    got = d[:, None] * (sc[:, sub] & 15) * q - dmin[:, None] * (sc[:, sub] >> 4)
    assert np.allclose(got, true_values(NAME, w)[:, 256:512], rtol=1e-5, atol=1e-9)


def test_prepared_activations_carry_q8k_numbers():
    """320 bytes a super-block: the Q8_K qs, its int16 bsums, its float d, 28 zero bytes."""
    src, dst = checks.prepared_q8k_blocks(NAME, ACT_BLOCK)
    assert np.array_equal(dst[:, :256], src[:, 4:260])
    assert np.array_equal(dst[:, 256:288], src[:, 260:292])
    assert np.array_equal(dst[:, 288:292], src[:, 0:4])
    assert not dst[:, 292:].any()


def q2k_constant_block(q: int, scale: int, m: int) -> np.ndarray:
    """One Q2_K super-block (84 GGUF bytes): every quant q in [0, 3], every sub-block scale `scale` and
    min m in [0, 15], d = 1, dmin = 0.5."""
    blk = np.zeros(84, np.uint8)
    blk[0:16] = scale | (m << 4)
    blk[16:80] = q * 0x55
    blk[80:82] = np.array([1.0], "<f2").view(np.uint8)
    blk[82:84] = np.array([0.5], "<f2").view(np.uint8)
    return blk


@pytest.mark.parametrize("q, scale, m", [(3, 15, 15), (3, 15, 0), (0, 0, 15), (1, 7, 8)])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_extremes_fit_the_int16_steps(q, scale, m, sign):
    """Activations all +-127: a 16-element sum x q is up to 16 * 3 * 127 = 6096 (the vpdpwssd's int16
    operand), the mins' sums 16 * 127 a sub-block; the packed product is the scalar one up to float
    rounding (a scale or min nibble misread would be far off)."""
    n = 512
    got, ref = checks.constant_row_products(NAME, q2k_constant_block(q, scale, m), n, sign)
    assert np.allclose(got, ref, rtol=1e-6, atol=1e-6), (got, ref)
    assert np.allclose(got, sign * n * (scale * q - 0.5 * m), rtol=1e-5, atol=1e-6)
